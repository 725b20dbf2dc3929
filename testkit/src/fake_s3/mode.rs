//! Provider modes: how faithfully the fake S3 honours conditional requests.
//!
//! Real S3-compatible stores differ in exactly the ways that break a lease:
//! some ignore `If-None-Match`, some check a condition and then write without
//! a lock, some refuse conditional headers outright. Each [`ProviderMode`]
//! reproduces one of those behaviours so that the simulator, the validator
//! and `cargo xtask fake-s3 --mode` can show what hoplock does on such a
//! store. The kebab-case names are shared by all three and by scenario files.

use std::fmt;
use std::str::FromStr;

/// In the `large-bodies-unconditional` mode, the PUT body size above which
/// conditions are ignored: 64 KiB, as the gateway that did it.
pub const LARGE_BODY_BYTES: usize = 64 * 1024;

/// In the `conditions-expire-per-key` mode, how many conditional writes of
/// one key are honoured before its conditions are ignored.
pub const CONDITIONS_PER_KEY: u32 = 50;

/// How the fake S3 treats conditional requests.
///
/// Every mode but [`ProviderMode::Honest`] is broken on purpose.
///
/// ```
/// use hoplock_testkit::fake_s3::ProviderMode;
///
/// let mode: ProviderMode = "non-atomic".parse()?;
/// assert_eq!(mode, ProviderMode::NonAtomic);
/// assert_eq!(mode.to_string(), "non-atomic");
/// assert!("garage".parse::<ProviderMode>().unwrap_err().to_string().contains("honest"));
/// # Ok::<(), hoplock_testkit::fake_s3::ParseModeError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum ProviderMode {
    /// Behaves like AWS S3: conditions are checked and applied atomically.
    #[default]
    Honest,
    /// Ignores `If-None-Match` on PUT, so every create succeeds (Garage).
    IgnoreIfNoneMatch,
    /// Ignores `If-Match` on PUT, so a write against a stale ETag succeeds.
    IgnoreIfMatch,
    /// Checks a PUT's condition, then writes later without a lock, so two
    /// overlapping conditional writes can both win.
    NonAtomic,
    /// A GET may return the version that was current up to
    /// `stale_read_window_ms` ago instead of the latest one.
    StaleReads,
    /// Ignores `If-Match` on DELETE, so a stale delete removes the object
    /// (some Ceph deployments).
    IgnoreConditionalDelete,
    /// Answers `501 NotImplemented` to a PUT or DELETE with a conditional
    /// header (Backblaze B2): loud and safe, but unusable.
    RejectConditional,
    /// Honours `If-Match` on an existing key, but a PUT with `If-Match` on a
    /// missing key creates it (MinIO before August 2025).
    IfMatchCreates,
    /// ETags made of the body's length and the whole second it was written
    /// in, not its MD5: different bytes of one length written within a
    /// second share an ETag, so a stale `If-Match` can match (ABA).
    WeakEtags,
    /// Answers a failed condition correctly (412, or 404 for `If-Match` on
    /// a missing key) but applies the refused write anyway
    /// [`Faults::late_apply_ms`](super::Faults::late_apply_ms) later, as a
    /// replicated store that queues a write before it checks the condition
    /// may.
    AppliesRefusedLate,
    /// Ignores the conditions of a PUT whose body is over
    /// [`LARGE_BODY_BYTES`], as a gateway
    /// that streams large bodies past its condition check may.
    LargeBodiesUnconditional,
    /// Honours conditions for the first
    /// [`CONDITIONS_PER_KEY`] conditional
    /// writes of a key and ignores them after that.
    ConditionsExpirePerKey,
    /// Writes are atomic, but every GET returns the object as it was
    /// [`Faults::read_lag_ms`](super::Faults::read_lag_ms) ago, as reads
    /// served by an asynchronous replica do.
    LaggingReads,
    /// Refuses an `If-Match` ETag in quotes with 412 and honours only the
    /// bare value (DigitalOcean Spaces and Hetzner are reported to).
    BareEtagsOnly,
    /// Honours a quoted `If-Match` ETag but ignores a bare one: the write
    /// succeeds whatever the object holds.
    IgnoresBareEtags,
}

impl ProviderMode {
    /// Every mode, honest first.
    pub const ALL: [ProviderMode; 15] = [
        ProviderMode::Honest,
        ProviderMode::IgnoreIfNoneMatch,
        ProviderMode::IgnoreIfMatch,
        ProviderMode::NonAtomic,
        ProviderMode::StaleReads,
        ProviderMode::IgnoreConditionalDelete,
        ProviderMode::RejectConditional,
        ProviderMode::IfMatchCreates,
        ProviderMode::WeakEtags,
        ProviderMode::AppliesRefusedLate,
        ProviderMode::LargeBodiesUnconditional,
        ProviderMode::ConditionsExpirePerKey,
        ProviderMode::LaggingReads,
        ProviderMode::BareEtagsOnly,
        ProviderMode::IgnoresBareEtags,
    ];

    /// The mode's kebab-case name, as scenario files and `--mode` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            ProviderMode::Honest => "honest",
            ProviderMode::IgnoreIfNoneMatch => "ignore-if-none-match",
            ProviderMode::IgnoreIfMatch => "ignore-if-match",
            ProviderMode::NonAtomic => "non-atomic",
            ProviderMode::StaleReads => "stale-reads",
            ProviderMode::IgnoreConditionalDelete => "ignore-conditional-delete",
            ProviderMode::RejectConditional => "reject-conditional",
            ProviderMode::IfMatchCreates => "if-match-creates",
            ProviderMode::WeakEtags => "weak-etags",
            ProviderMode::AppliesRefusedLate => "applies-refused-late",
            ProviderMode::LargeBodiesUnconditional => "large-bodies-unconditional",
            ProviderMode::ConditionsExpirePerKey => "conditions-expire-per-key",
            ProviderMode::LaggingReads => "lagging-reads",
            ProviderMode::BareEtagsOnly => "bare-etags-only",
            ProviderMode::IgnoresBareEtags => "ignores-bare-etags",
        }
    }

    /// One line saying what the mode does, for help texts.
    pub const fn description(self) -> &'static str {
        match self {
            ProviderMode::Honest => "conditions checked and applied atomically, as on AWS S3",
            ProviderMode::IgnoreIfNoneMatch => "If-None-Match ignored on PUT: every create wins",
            ProviderMode::IgnoreIfMatch => "If-Match ignored on PUT: stale writes win",
            ProviderMode::NonAtomic => {
                "condition checked, then written later without a lock: racing writers can both win"
            }
            ProviderMode::StaleReads => "GET may return an older version for a while",
            ProviderMode::IgnoreConditionalDelete => "If-Match ignored on DELETE: stale deletes win",
            ProviderMode::RejectConditional => "501 NotImplemented for conditional PUT and DELETE",
            ProviderMode::IfMatchCreates => "If-Match on a missing key creates it",
            ProviderMode::WeakEtags => "ETags from length and whole second: same-length writes within a second match",
            ProviderMode::AppliesRefusedLate => "a refused conditional write answered 412 but applied seconds later",
            ProviderMode::LargeBodiesUnconditional => "conditions ignored on PUT bodies over 64 KiB",
            ProviderMode::ConditionsExpirePerKey => "conditions honoured for a key's first 50 conditional writes only",
            ProviderMode::LaggingReads => "atomic writes, but every GET shows the object as it was read_lag_ms ago",
            ProviderMode::BareEtagsOnly => "If-Match refused with 412 when the ETag is quoted; bare ETags honoured",
            ProviderMode::IgnoresBareEtags => "If-Match honoured when quoted, ignored when bare",
        }
    }

    /// Whether the mode is safe to hold a lease on (only `honest` is, and
    /// `reject-conditional`, which refuses loudly rather than lying).
    /// `lagging-reads` and `bare-etags-only` are safe for a client that
    /// waits for its reads and sends bare ETags, but they are still not
    /// what S3 does, so they count as broken here.
    pub const fn is_safe(self) -> bool {
        matches!(self, ProviderMode::Honest | ProviderMode::RejectConditional)
    }
}

impl fmt::Display for ProviderMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A provider mode name that is not one of [`ProviderMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider mode {given:?}; valid modes: {}", valid_names())]
pub struct ParseModeError {
    /// The name that was given.
    pub given: String,
}

fn valid_names() -> String {
    ProviderMode::ALL.iter().map(|mode| mode.name()).collect::<Vec<_>>().join(", ")
}

impl FromStr for ProviderMode {
    type Err = ParseModeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ProviderMode::ALL
            .into_iter()
            .find(|mode| mode.name() == text)
            .ok_or_else(|| ParseModeError { given: text.to_owned() })
    }
}

impl TryFrom<String> for ProviderMode {
    type Error = ParseModeError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<ProviderMode> for String {
    fn from(mode: ProviderMode) -> String {
        mode.name().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for mode in ProviderMode::ALL {
            assert_eq!(mode.to_string().parse::<ProviderMode>(), Ok(mode));
            assert!(!mode.description().is_empty());
        }
        let mut names: Vec<_> = ProviderMode::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ProviderMode::ALL.len());
    }

    #[test]
    fn a_bad_name_lists_every_valid_one() {
        let err = "Honest".parse::<ProviderMode>().unwrap_err();
        let message = err.to_string();
        for mode in ProviderMode::ALL {
            assert!(message.contains(mode.name()), "{message}");
        }
    }

    #[test]
    fn serde_uses_the_same_names() {
        let mode: ProviderMode = serde_json::from_str("\"stale-reads\"").unwrap();
        assert_eq!(mode, ProviderMode::StaleReads);
        assert_eq!(serde_json::to_string(&ProviderMode::IgnoreIfMatch).unwrap(), "\"ignore-if-match\"");
        assert!(serde_json::from_str::<ProviderMode>("\"nope\"").is_err());
    }
}
