//! The object store state machine: buckets of keys, each with its current
//! object and, for stale reads, the versions it had before.
//!
//! This module does no I/O and reads no clock: every mutation takes the time
//! it happens at, and every operation returns a typed outcome. The HTTP front
//! end ([`super::http`]) decides when to call what; in particular, an honest
//! provider calls [`Store::put`] (check and write in one step) while a
//! non-atomic one calls [`Store::check_put`] and, later, [`Store::apply_put`].
//!
//! ```
//! use std::time::{Duration, SystemTime};
//!
//! use bytes::Bytes;
//! use hoplock_testkit::fake_s3::store::{Conditions, EtagCondition, Refusal, Store};
//!
//! let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
//! let mut store = Store::new();
//! store.create_bucket("b");
//! let create = Conditions { if_none_match: Some(EtagCondition::Any), ..Conditions::default() };
//! let first = store.put("b", "k", Bytes::from("one"), None, &create, now)?;
//! assert_eq!(
//!     store.put("b", "k", Bytes::from("two"), None, &create, now),
//!     Err(Refusal::PreconditionFailed { header: "If-None-Match" }),
//! );
//! assert_eq!(store.get("b", "k", &Conditions::default())?.etag(), first.etag());
//! # Ok::<(), Refusal>(())
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use md5::{Digest, Md5};

/// How many past versions a key keeps at most, whatever the stale-read
/// window: a limit on memory, should a scenario write in a tight loop.
pub const MAX_VERSIONS_PER_KEY: usize = 1024;

/// One stored version of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    body: Bytes,
    etag: String,
    last_modified: SystemTime,
    content_type: Option<String>,
}

impl Object {
    /// A version holding `body`, written at `now`. Its ETag is the quoted
    /// hex MD5 of the body, as S3 gives for a single-part upload without
    /// KMS, so identical bodies get identical ETags.
    pub fn new(body: Bytes, content_type: Option<String>, now: SystemTime) -> Object {
        Object { etag: etag_of(&body), body, last_modified: now, content_type }
    }

    /// The stored bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The quoted ETag, e.g. `"5d41402abc4b2a76b9719d911017c592"`.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// When this version was written, by the server's wall clock.
    pub fn last_modified(&self) -> SystemTime {
        self.last_modified
    }

    /// The `Content-Type` it was stored with, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }
}

/// The quoted hex MD5 of `body`: the ETag S3 gives it.
pub fn etag_of(body: &[u8]) -> String {
    let mut etag = String::with_capacity(34);
    etag.push('"');
    push_hex(&Md5::digest(body), &mut etag);
    etag.push('"');
    etag
}

/// Appends `bytes` in lower-case hex, nibble by nibble rather than through
/// `write!`: every PUT writes an ETag.
pub(crate) fn push_hex(bytes: &[u8], out: &mut String) {
    const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
    for &byte in bytes {
        out.push(char::from(HEX_LOWER[usize::from(byte >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(byte & 0x0f)]));
    }
}

/// The quoted ETag of a body of `len` bytes written at `now` under
/// [`Store::set_weak_etags`]: hex length and hex whole seconds.
pub fn weak_etag_of(len: usize, now: SystemTime) -> String {
    let seconds = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_secs());
    format!("\"{len:x}-{seconds:x}\"")
}

/// The value of an `If-Match` or `If-None-Match` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtagCondition {
    /// `*`: any existing object.
    Any,
    /// A list of ETags, kept without quotes or a `W/` prefix: S3 compares
    /// the bare value and accepts it quoted or not.
    Tags(Vec<String>),
}

/// A conditional header that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the conditional header value {0:?} is not `*` or a list of ETags")]
pub struct EtagParseError(pub String);

impl EtagCondition {
    /// Parses a header value: `*`, or comma-separated ETags, quoted or bare.
    pub fn parse(value: &str) -> Result<EtagCondition, EtagParseError> {
        let value = value.trim();
        if value == "*" {
            return Ok(EtagCondition::Any);
        }
        let mut tags = Vec::new();
        for tag in value.split(',') {
            let tag = tag.trim();
            let tag = tag.strip_prefix("W/").unwrap_or(tag);
            let tag = tag.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(tag);
            if tag.is_empty() || tag.contains('"') {
                return Err(EtagParseError(value.to_owned()));
            }
            tags.push(tag.to_owned());
        }
        Ok(EtagCondition::Tags(tags))
    }

    /// Whether `object` satisfies the condition.
    pub fn matches(&self, object: &Object) -> bool {
        match self {
            EtagCondition::Any => true,
            EtagCondition::Tags(tags) => {
                let bare = object.etag.trim_matches('"');
                tags.iter().any(|tag| tag == bare)
            }
        }
    }
}

/// The conditions a request carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    /// `If-Match`.
    pub if_match: Option<EtagCondition>,
    /// `If-None-Match`.
    pub if_none_match: Option<EtagCondition>,
}

impl Conditions {
    /// Whether any condition is present.
    pub fn is_conditional(&self) -> bool {
        self.if_match.is_some() || self.if_none_match.is_some()
    }
}

/// Why the store did not do what was asked. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The bucket does not exist (404).
    #[error("the specified bucket does not exist")]
    NoSuchBucket,
    /// The key does not exist (404), including for `If-Match` on a missing
    /// key, as AWS answers.
    #[error("the specified key does not exist")]
    NoSuchKey,
    /// A condition did not hold (412).
    #[error("the {header} condition did not hold")]
    PreconditionFailed {
        /// The header whose condition failed, as S3 names it in
        /// `<Condition>`.
        header: &'static str,
    },
    /// A read's `If-None-Match` matched the current version (304).
    #[error("not modified")]
    NotModified {
        /// The current version's ETag.
        etag: String,
        /// The current version's modification time.
        last_modified: SystemTime,
    },
    /// The request asks for something S3 does not do (501), such as
    /// `If-None-Match` with an ETag on a PUT: S3 supports only `*` there.
    #[error("not implemented: {0}")]
    NotImplemented(&'static str),
}

/// One point of a key's timeline: from `from` on, the key held `object`
/// (`None`: it did not exist).
#[derive(Clone, Debug)]
struct Entry {
    from: SystemTime,
    object: Option<Object>,
}

/// The versions of one key, oldest first; the last is current.
#[derive(Clone, Debug, Default)]
struct Timeline {
    entries: VecDeque<Entry>,
}

impl Timeline {
    fn current(&self) -> Option<&Object> {
        self.entries.back().and_then(|entry| entry.object.as_ref())
    }

    /// The object current at `at`. Before the first recorded entry the key
    /// is taken not to have existed.
    fn as_of(&self, at: SystemTime) -> Option<&Object> {
        self.entries.iter().rev().find(|entry| entry.from <= at).and_then(|entry| entry.object.as_ref())
    }

    fn push(&mut self, object: Option<Object>, now: SystemTime, retention: Duration) {
        // A wall clock stepped back must not reorder the timeline: stamp the
        // change no earlier than the one before it.
        let from = self.entries.back().map_or(now, |last| last.from.max(now));
        self.entries.push_back(Entry { from, object });
        // The oldest entry is needed only while a read within the window can
        // still land before its successor took over.
        let horizon = now.checked_sub(retention).unwrap_or(SystemTime::UNIX_EPOCH);
        while self.entries.len() > MAX_VERSIONS_PER_KEY
            || (self.entries.len() > 1 && (retention.is_zero() || self.entries[1].from <= horizon))
        {
            self.entries.pop_front();
        }
    }

    /// Whether the timeline holds nothing worth keeping: no current object
    /// and no history a stale read could return.
    fn is_vacant(&self) -> bool {
        self.entries.len() <= 1 && self.current().is_none()
    }
}

#[derive(Clone, Debug, Default)]
struct Bucket {
    keys: BTreeMap<String, Timeline>,
}

/// Buckets of objects with S3's conditional semantics.
///
/// Reads are strongly consistent: [`Store::get`] returns the latest version.
/// [`Store::get_as_of`] returns an older one, for the `stale-reads` mode;
/// how far back it can reach is set by [`Store::set_history_retention`]
/// (zero by default, keeping only current versions).
#[derive(Clone, Debug, Default)]
pub struct Store {
    buckets: BTreeMap<String, Bucket>,
    retention: Duration,
    weak_etags: bool,
}

impl Store {
    /// An empty store without buckets.
    pub fn new() -> Store {
        Store::default()
    }

    /// Keeps superseded versions for `retention`, so that
    /// [`Store::get_as_of`] can reach that far back.
    pub fn set_history_retention(&mut self, retention: Duration) {
        self.retention = retention;
    }

    /// Makes new versions' ETags out of the body's length and the whole
    /// second it was written in, as some file-backed servers derive them
    /// from size and modification time, instead of the body's MD5: different
    /// bytes of one length written within a second share an ETag, so a
    /// stale `If-Match` matches a newer object (ABA).
    pub fn set_weak_etags(&mut self, weak: bool) {
        self.weak_etags = weak;
    }

    /// Creates `bucket`. Returns false if it already existed.
    pub fn create_bucket(&mut self, bucket: &str) -> bool {
        if self.buckets.contains_key(bucket) {
            return false;
        }
        self.buckets.insert(bucket.to_owned(), Bucket::default());
        true
    }

    /// Whether `bucket` exists.
    pub fn has_bucket(&self, bucket: &str) -> bool {
        self.buckets.contains_key(bucket)
    }

    /// The bucket names, sorted.
    pub fn buckets(&self) -> impl Iterator<Item = &str> {
        self.buckets.keys().map(String::as_str)
    }

    /// The current object under `key`, if any, ignoring conditions.
    pub fn current(&self, bucket: &str, key: &str) -> Option<&Object> {
        self.buckets.get(bucket)?.keys.get(key)?.current()
    }

    /// Reads the latest version, with GET's conditions: a failed `If-Match`
    /// is 412, a matching `If-None-Match` is 304.
    pub fn get(&self, bucket: &str, key: &str, conditions: &Conditions) -> Result<Object, Refusal> {
        let timeline = self.timeline(bucket, key)?;
        read_with(timeline.and_then(Timeline::current), conditions)
    }

    /// Reads the version that was current at `at`, as a store with stale
    /// reads may. Versions older than the history retention are gone, so a
    /// time before that reads as the oldest version kept.
    pub fn get_as_of(
        &self,
        bucket: &str,
        key: &str,
        at: SystemTime,
        conditions: &Conditions,
    ) -> Result<Object, Refusal> {
        let timeline = self.timeline(bucket, key)?;
        read_with(timeline.and_then(|t| t.as_of(at)), conditions)
    }

    /// Checks a PUT's conditions against the latest version without
    /// writing.
    pub fn check_put(&self, bucket: &str, key: &str, conditions: &Conditions) -> Result<(), Refusal> {
        let current = self.timeline(bucket, key)?.and_then(Timeline::current);
        if let Some(EtagCondition::Tags(_)) = conditions.if_none_match {
            return Err(Refusal::NotImplemented("If-None-Match on PUT supports only `*`"));
        }
        check_if_match(current, conditions)?;
        if conditions.if_none_match.is_some() && current.is_some() {
            return Err(Refusal::PreconditionFailed { header: "If-None-Match" });
        }
        Ok(())
    }

    /// Writes `body` under `key` at `now` without checking conditions (the
    /// bucket must exist). Returns the new version.
    pub fn apply_put(
        &mut self,
        bucket: &str,
        key: &str,
        body: Bytes,
        content_type: Option<String>,
        now: SystemTime,
    ) -> Result<Object, Refusal> {
        let retention = self.retention;
        let bucket = self.buckets.get_mut(bucket).ok_or(Refusal::NoSuchBucket)?;
        let mut object = Object::new(body, content_type, now);
        if self.weak_etags {
            object.etag = weak_etag_of(object.body.len(), now);
        }
        bucket.keys.entry(key.to_owned()).or_default().push(Some(object.clone()), now, retention);
        Ok(object)
    }

    /// Checks the conditions and writes, in one step: what an honest
    /// provider does under its lock.
    pub fn put(
        &mut self,
        bucket: &str,
        key: &str,
        body: Bytes,
        content_type: Option<String>,
        conditions: &Conditions,
        now: SystemTime,
    ) -> Result<Object, Refusal> {
        self.check_put(bucket, key, conditions)?;
        self.apply_put(bucket, key, body, content_type, now)
    }

    /// Checks a DELETE's `If-Match` without deleting. A condition on a
    /// missing key is 404, as on AWS; without a condition, deleting a
    /// missing key succeeds.
    pub fn check_delete(&self, bucket: &str, key: &str, conditions: &Conditions) -> Result<(), Refusal> {
        let current = self.timeline(bucket, key)?.and_then(Timeline::current);
        check_if_match(current, conditions)?;
        Ok(())
    }

    /// Deletes `key` at `now` without checking conditions. Returns the
    /// removed version, if there was one.
    pub fn apply_delete(&mut self, bucket: &str, key: &str, now: SystemTime) -> Result<Option<Object>, Refusal> {
        let retention = self.retention;
        let bucket = self.buckets.get_mut(bucket).ok_or(Refusal::NoSuchBucket)?;
        let Some(timeline) = bucket.keys.get_mut(key) else {
            return Ok(None);
        };
        let removed = timeline.current().cloned();
        if removed.is_some() {
            timeline.push(None, now, retention);
        }
        if timeline.is_vacant() {
            bucket.keys.remove(key);
        }
        Ok(removed)
    }

    /// Checks the conditions and deletes, in one step.
    pub fn delete(
        &mut self,
        bucket: &str,
        key: &str,
        conditions: &Conditions,
        now: SystemTime,
    ) -> Result<Option<Object>, Refusal> {
        self.check_delete(bucket, key, conditions)?;
        self.apply_delete(bucket, key, now)
    }

    fn timeline(&self, bucket: &str, key: &str) -> Result<Option<&Timeline>, Refusal> {
        let bucket = self.buckets.get(bucket).ok_or(Refusal::NoSuchBucket)?;
        Ok(bucket.keys.get(key))
    }
}

fn read_with(object: Option<&Object>, conditions: &Conditions) -> Result<Object, Refusal> {
    let object = object.ok_or(Refusal::NoSuchKey)?;
    if let Some(condition) = &conditions.if_match
        && !condition.matches(object)
    {
        return Err(Refusal::PreconditionFailed { header: "If-Match" });
    }
    if let Some(condition) = &conditions.if_none_match
        && condition.matches(object)
    {
        return Err(Refusal::NotModified { etag: object.etag.clone(), last_modified: object.last_modified });
    }
    Ok(object.clone())
}

/// The `If-Match` rule shared by PUT and DELETE: a condition on a missing
/// key is 404 `NoSuchKey`, on another version 412.
fn check_if_match(current: Option<&Object>, conditions: &Conditions) -> Result<(), Refusal> {
    match (&conditions.if_match, current) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(Refusal::NoSuchKey),
        (Some(condition), Some(object)) if !condition.matches(object) => {
            Err(Refusal::PreconditionFailed { header: "If-Match" })
        }
        (Some(_), Some(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn create() -> Conditions {
        Conditions { if_none_match: Some(EtagCondition::Any), ..Conditions::default() }
    }

    fn if_match(object: &Object) -> Conditions {
        Conditions { if_match: Some(EtagCondition::parse(object.etag()).unwrap()), ..Conditions::default() }
    }

    fn store() -> Store {
        let mut store = Store::new();
        assert!(store.create_bucket("b"));
        assert!(!store.create_bucket("b"));
        store
    }

    #[test]
    fn weak_etags_tell_apart_only_length_and_second() {
        let mut store = Store::new();
        store.create_bucket("b");
        store.set_weak_etags(true);
        let plain = Conditions::default();
        let first = store.put("b", "k", Bytes::from("aaaa"), None, &plain, t(1)).unwrap();
        let second = store.put("b", "k", Bytes::from("bbbb"), None, &plain, t(1)).unwrap();
        assert_eq!(first.etag(), second.etag(), "same length, same second");
        let later = store.put("b", "k", Bytes::from("cccc"), None, &plain, t(2)).unwrap();
        let longer = store.put("b", "k", Bytes::from("ddddd"), None, &plain, t(2)).unwrap();
        assert_ne!(later.etag(), second.etag());
        assert_ne!(longer.etag(), later.etag());
        // An ETag read before another write of the same length in the same
        // second still matches: the stale write wins.
        let replaced = store.put("b", "k", Bytes::from("fffff"), None, &plain, t(2)).unwrap();
        assert_eq!(replaced.etag(), longer.etag());
        assert!(store.put("b", "k", Bytes::from("ggggg"), None, &if_match(&longer), t(2)).is_ok());
    }

    #[test]
    fn etags_are_the_quoted_md5_of_the_body() {
        assert_eq!(etag_of(b"hello"), "\"5d41402abc4b2a76b9719d911017c592\"");
        assert_eq!(etag_of(b""), "\"d41d8cd98f00b204e9800998ecf8427e\"");
        let a = Object::new(Bytes::from("x"), None, t(0));
        let b = Object::new(Bytes::from("x"), Some("text/plain".into()), t(9));
        assert_eq!(a.etag(), b.etag());
    }

    #[test]
    fn etag_conditions_parse_quoted_bare_weak_and_lists() {
        let object = Object::new(Bytes::from("hello"), None, t(0));
        for value in [
            "\"5d41402abc4b2a76b9719d911017c592\"",
            "5d41402abc4b2a76b9719d911017c592",
            "W/\"5d41402abc4b2a76b9719d911017c592\"",
            "\"other\", \"5d41402abc4b2a76b9719d911017c592\"",
            "*",
        ] {
            assert!(EtagCondition::parse(value).unwrap().matches(&object), "{value}");
        }
        assert!(!EtagCondition::parse("\"other\"").unwrap().matches(&object));
        for bad in ["", "\"\"", "a,,b", "\"a\"b\""] {
            assert!(EtagCondition::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn conditional_puts_follow_s3() {
        let mut store = store();
        let first = store.put("b", "k", Bytes::from("1"), None, &create(), t(0)).unwrap();
        assert_eq!(
            store.put("b", "k", Bytes::from("2"), None, &create(), t(1)),
            Err(Refusal::PreconditionFailed { header: "If-None-Match" })
        );
        let second = store.put("b", "k", Bytes::from("2"), None, &if_match(&first), t(1)).unwrap();
        assert_eq!(
            store.put("b", "k", Bytes::from("3"), None, &if_match(&first), t(2)),
            Err(Refusal::PreconditionFailed { header: "If-Match" })
        );
        assert_eq!(store.put("b", "missing", Bytes::from("3"), None, &if_match(&first), t(2)), Err(Refusal::NoSuchKey));
        let tags =
            Conditions { if_none_match: Some(EtagCondition::parse("\"abc\"").unwrap()), ..Conditions::default() };
        assert!(matches!(store.put("b", "k", Bytes::from("3"), None, &tags, t(2)), Err(Refusal::NotImplemented(_))));
        assert_eq!(store.put("nope", "k", Bytes::new(), None, &create(), t(2)), Err(Refusal::NoSuchBucket));
        assert_eq!(store.current("b", "k"), Some(&second));
    }

    #[test]
    fn conditional_reads_and_deletes_follow_s3() {
        let mut store = store();
        let first = store.put("b", "k", Bytes::from("1"), None, &create(), t(0)).unwrap();
        let not_modified =
            Conditions { if_none_match: Some(EtagCondition::parse(first.etag()).unwrap()), ..Conditions::default() };
        assert!(matches!(store.get("b", "k", &not_modified), Err(Refusal::NotModified { .. })));
        let stale = Conditions { if_match: Some(EtagCondition::parse("\"stale\"").unwrap()), ..Conditions::default() };
        assert_eq!(store.get("b", "k", &stale), Err(Refusal::PreconditionFailed { header: "If-Match" }));
        assert_eq!(store.delete("b", "k", &stale, t(1)), Err(Refusal::PreconditionFailed { header: "If-Match" }));
        assert_eq!(store.delete("b", "k", &if_match(&first), t(1)), Ok(Some(first.clone())));
        assert_eq!(store.get("b", "k", &Conditions::default()), Err(Refusal::NoSuchKey));
        assert_eq!(store.delete("b", "k", &if_match(&first), t(2)), Err(Refusal::NoSuchKey));
        assert_eq!(store.delete("b", "k", &Conditions::default(), t(2)), Ok(None));
    }

    #[test]
    fn a_check_then_a_later_write_can_both_win() {
        // What the non-atomic mode does with two overlapping creates.
        let mut store = store();
        store.check_put("b", "k", &create()).unwrap();
        store.check_put("b", "k", &create()).unwrap();
        store.apply_put("b", "k", Bytes::from("a"), None, t(0)).unwrap();
        store.apply_put("b", "k", Bytes::from("b"), None, t(0)).unwrap();
        assert_eq!(store.current("b", "k").unwrap().body(), "b");
    }

    #[test]
    fn stale_reads_see_the_version_current_back_then() {
        let mut store = store();
        store.set_history_retention(Duration::from_secs(10));
        let one = store.put("b", "k", Bytes::from("1"), None, &create(), t(100)).unwrap();
        let two = store.put("b", "k", Bytes::from("2"), None, &if_match(&one), t(105)).unwrap();
        let plain = Conditions::default();
        assert_eq!(store.get_as_of("b", "k", t(99), &plain), Err(Refusal::NoSuchKey));
        assert_eq!(store.get_as_of("b", "k", t(104), &plain), Ok(one.clone()));
        assert_eq!(store.get_as_of("b", "k", t(105), &plain), Ok(two.clone()));
        store.delete("b", "k", &plain, t(107)).unwrap();
        assert_eq!(store.get_as_of("b", "k", t(106), &plain), Ok(two));
        assert_eq!(store.get("b", "k", &plain), Err(Refusal::NoSuchKey));
        // Past the retention only the latest versions are kept.
        store.put("b", "k", Bytes::from("3"), None, &create(), t(200)).unwrap();
        assert_eq!(store.get_as_of("b", "k", t(104), &plain), Err(Refusal::NoSuchKey));
    }

    #[test]
    fn without_retention_only_current_versions_are_kept() {
        let mut store = store();
        let one = store.put("b", "k", Bytes::from("1"), None, &create(), t(0)).unwrap();
        store.put("b", "k", Bytes::from("2"), None, &if_match(&one), t(1)).unwrap();
        assert_eq!(store.buckets["b"].keys["k"].entries.len(), 1);
        store.delete("b", "k", &Conditions::default(), t(2)).unwrap();
        assert!(store.buckets["b"].keys.is_empty());
    }

    #[test]
    fn history_is_bounded() {
        let mut store = store();
        store.set_history_retention(Duration::from_secs(3600));
        for i in 0..(MAX_VERSIONS_PER_KEY as u64 + 50) {
            store.put("b", "k", Bytes::from(i.to_string()), None, &Conditions::default(), t(i)).unwrap();
        }
        assert_eq!(store.buckets["b"].keys["k"].entries.len(), MAX_VERSIONS_PER_KEY);
    }
}
