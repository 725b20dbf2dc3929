//! Which forms of an ETag the store honours in `If-Match`: as it sent it
//! (in quotes) and bare. Providers differ: most take both, some refuse the
//! quoted form with 412, and a store that takes a form but ignores it lets
//! any write through.

use super::{Fatal, Run, held, not_supported};
use crate::check_s3::probe::{Answer, Condition};
use crate::check_s3::report::{Check, Verdict};

/// How a store treats one form of an ETag in `If-Match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// A replaced ETag is refused and the current one accepted.
    Honoured,
    /// The current ETag is refused too: the form is not understood.
    Refused,
}

impl Run<'_> {
    /// The "etag forms" check: a replaced ETag in either form must be
    /// refused. Decides the form every later check sends: bare with
    /// `--bare-etags` or when the store honours only that form, quoted
    /// otherwise.
    pub(super) async fn etag_forms(&mut self) -> Result<(), Fatal> {
        const NAME: &str = "etag forms";
        self.begin(NAME);
        let name = "forms";
        let old = self.put(name, &Condition::None, self.small(name, 80_001)).await?;
        let now = self.put(name, &Condition::None, self.small(name, 80_002)).await?;
        let (Some(old), Some(mut current)) =
            (old.etag.clone().filter(|_| old.succeeded()), now.etag.clone().filter(|_| now.succeeded()))
        else {
            self.push(Check::skipped(NAME, format!("not judged: a plain write failed: {}", now.describe())));
            return Ok(());
        };
        if old == current {
            let why =
                format!("two writes of different bytes got the same ETag {old}, so a replaced ETag still matches");
            self.push(Check::fail(NAME, Verdict::WeakEtags, why));
            return Ok(());
        }
        let quoted = |etag: &str| format!("\"{}\"", etag.trim_matches('"'));
        let bare = |etag: &str| etag.trim_matches('"').to_owned();
        // Replaced ETags first, in both forms: neither may take effect.
        let stale_quoted = self.put(name, &Condition::MatchesAsGiven(quoted(&old)), self.small(name, 80_003)).await?;
        let stale_bare = self.put(name, &Condition::MatchesAsGiven(bare(&old)), self.small(name, 80_004)).await?;
        let fresh_quoted =
            self.put(name, &Condition::MatchesAsGiven(quoted(&current)), self.small(name, 80_005)).await?;
        let mut expected = 80_002;
        if fresh_quoted.succeeded() {
            current = fresh_quoted.etag.clone().unwrap_or(current);
            expected = 80_005;
        }
        let fresh_bare = self.put(name, &Condition::MatchesAsGiven(bare(&current)), self.small(name, 80_006)).await?;
        if fresh_bare.succeeded() {
            expected = 80_006;
        }
        let (stored, _) = self.settled(name, Some(expected)).await?;
        let form = |fresh: &Answer| if fresh.succeeded() { Form::Honoured } else { Form::Refused };
        let (quoted_form, bare_form) = (form(&fresh_quoted), form(&fresh_bare));
        let evidence = format!(
            "replaced ETag quoted: {}, bare: {}; current ETag quoted: {}, bare: {}; object holds {}",
            stale_quoted.describe(),
            stale_bare.describe(),
            fresh_quoted.describe(),
            fresh_bare.describe(),
            held(stored)
        );
        let ignored = [(&stale_quoted, 80_003, "quoted"), (&stale_bare, 80_004, "bare")]
            .into_iter()
            .find(|(answer, id, _)| answer.succeeded() || stored == Some(*id));
        let bare_only = quoted_form == Form::Refused && bare_form == Form::Honoured;
        self.probe.use_bare_etags(self.settings.bare_etags || bare_only);
        let check = if let Some((_, _, which)) = ignored {
            Check::fail(
                NAME,
                Verdict::IgnoresConditions,
                format!("If-Match with a replaced ETag in the {which} form took effect ({evidence})"),
            )
        } else if bare_only {
            Check::pass(
                NAME,
                format!(
                    "only the bare form is honoured; a quoted ETag is refused even when current. hoplock finds this \
                     out when it starts (S3Backend::verify) and sends ETags bare, as every check below does \
                     ({evidence})"
                ),
            )
        } else if quoted_form == Form::Refused && bare_form == Form::Refused {
            if not_supported(&fresh_quoted) {
                Check::not_supported(NAME, evidence)
            } else {
                Check::skipped(NAME, format!("not judged: a current ETag was accepted in neither form ({evidence})"))
            }
        } else if self.settings.bare_etags && bare_form == Form::Refused {
            Check::fail(
                NAME,
                Verdict::Unsupported,
                format!("--bare-etags was given, but a current ETag sent bare is refused ({evidence})"),
            )
        } else {
            let sent = if self.probe.bare_etags() { "bare (--bare-etags)" } else { "as the store sends them" };
            Check::pass(NAME, format!("replaced ETags refused in both forms; checks send ETags {sent} ({evidence})"))
        };
        self.push(check);
        Ok(())
    }
}
