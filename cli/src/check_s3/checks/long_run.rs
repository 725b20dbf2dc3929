//! Many conditional writes of one key, one at a time: a store that honours
//! conditions only for a key's first writes (a cache of conditions, a
//! counter that runs out) shows here, whatever `--rounds` says. A lease key
//! gets a renewal every few seconds for as long as it lives.

use super::{Fatal, Run};
use crate::check_s3::probe::Condition;
use crate::check_s3::report::{Check, Verdict};

/// Writes with the current ETag, each followed by one with the ETag it
/// replaced.
pub const LONG_RUN_WRITES: u64 = 200;

/// The first write id of the run.
const FIRST_ID: u64 = 500_000;

impl Run<'_> {
    /// The "many writes to one key" check.
    pub(super) async fn long_run(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "many writes to one key";
        self.begin(NAME);
        let name = "long";
        let base = self.put(name, &Condition::None, self.small(name, FIRST_ID)).await?;
        let Some(mut etag) = base.etag.clone().filter(|_| base.succeeded()) else {
            self.push(Check::skipped(NAME, format!("not judged: a plain write failed: {}", base.describe())));
            return Ok(());
        };
        for write in 0..LONG_RUN_WRITES {
            let id = FIRST_ID + 1 + 2 * write;
            let current = self.put(name, &Condition::Matches(etag.clone()), self.small(name, id)).await?;
            let Some(next) = current.etag.clone().filter(|_| current.succeeded()) else {
                // Nobody else writes this key: whatever replaced the object
                // was one of this run's refused writes, or the store lost
                // track of its own ETag.
                let (stored, _) = self.fresh_read(name).await?;
                let late = stored.is_some_and(|id| self.probe.refused(name).iter().any(|write| write.id == id));
                let evidence = format!(
                    "after {write} pairs, a write with the current ETag answered {}; the object holds {}",
                    current.describe(),
                    super::held(stored)
                );
                self.push(if late {
                    Check::fail(NAME, Verdict::IgnoresConditions, format!("a refused write took effect: {evidence}"))
                } else {
                    Check::skipped(NAME, format!("not judged: {evidence}"))
                });
                return Ok(());
            };
            if next == etag {
                let why = format!("write {} of the key, with different bytes, kept the ETag {etag}", 2 * write + 1);
                self.push(Check::fail(NAME, Verdict::WeakEtags, why));
                return Ok(());
            }
            let stale = self.put(name, &Condition::Matches(etag.clone()), self.small(name, id + 1)).await?;
            if stale.succeeded() {
                let evidence = format!(
                    "write {} of the key: If-Match with the ETag replaced one write before answered {}, after {} \
                     writes with the current ETag and {write} replaced ones refused",
                    2 * write + 2,
                    stale.describe(),
                    write + 1
                );
                self.push(Check::fail(NAME, Verdict::IgnoresConditions, evidence));
                return Ok(());
            }
            etag = next;
        }
        self.push(Check::pass(
            NAME,
            format!(
                "{LONG_RUN_WRITES} writes with the current ETag succeeded and {LONG_RUN_WRITES} with the ETag each \
                 replaced were refused, one at a time on one key"
            ),
        ));
        Ok(())
    }
}
