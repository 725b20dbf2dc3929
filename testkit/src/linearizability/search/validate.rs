//! Before and after the search: a history's shape checked before any search,
//! and an order replayed on a concrete register to confirm what the search
//! found.

use super::*;

/// Checks the shape of every operation before any search.
pub(in crate::linearizability) fn validate(history: &[Operation]) -> Result<(), HistoryError> {
    if history.len() > super::super::MAX_OPERATIONS {
        return Err(HistoryError::TooLong { len: history.len() });
    }
    for (index, op) in history.iter().enumerate() {
        let Reply::Received { at, outcome } = op.reply else {
            continue;
        };
        if at < op.invoke {
            return Err(HistoryError::ResponseBeforeInvoke { index, invoke: op.invoke, response: at });
        }
        let fits = matches!(
            (op.call, outcome),
            (Call::Read, Outcome::Missing | Outcome::Value(_))
                | (Call::Put { .. } | Call::Remove, Outcome::Ok)
                | (Call::Create { .. } | Call::Update { .. } | Call::Delete { .. }, Outcome::Ok | Outcome::Refused,)
        );
        if !fits {
            return Err(HistoryError::OutcomeMismatch { index, call: op.call, outcome });
        }
    }
    Ok(())
}

/// Replays `order` on a concrete register starting at `initial`.
pub(in crate::linearizability) fn replay(
    history: &[Operation],
    order: &[usize],
    initial: Option<Version>,
) -> Option<Version> {
    let mut state = initial;
    for op in order.iter().filter_map(|&i| history.get(i)) {
        if op.outcome() == Some(Outcome::Refused) {
            continue;
        }
        match op.call {
            Call::Read => {}
            Call::Create { value } | Call::Put { value } | Call::Update { new: value, .. } => {
                state = Some(value);
            }
            Call::Delete { .. } | Call::Remove => state = None,
        }
    }
    state
}
