//! What a scenario's runs must show (`expect`), and the findings a run can
//! show: the violations by property, and stale writes fenced or accepted.

use super::*;

/// What a scenario's runs must show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawExpect", into = "RawExpect")]
pub enum Expect {
    /// No seed breaks any property.
    Safe,
    /// Each finding shows in at least one seed.
    Findings(Vec<Finding>),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum RawExpect {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<RawExpect> for Expect {
    type Error = String;

    fn try_from(raw: RawExpect) -> Result<Expect, String> {
        match raw {
            RawExpect::Word(word) if word == "safe" => Ok(Expect::Safe),
            RawExpect::Word(word) => Err(format!(
                "expect must be \"safe\" or a list of findings such as [\"one-holder-per-generation\"], not {word:?}"
            )),
            RawExpect::List(names) if names.is_empty() => {
                Err("expect = [] would accept anything; write expect = \"safe\" instead".into())
            }
            RawExpect::List(names) => {
                names.iter().map(|name| name.parse()).collect::<Result<_, _>>().map(Expect::Findings)
            }
        }
    }
}

impl From<Expect> for RawExpect {
    fn from(expect: Expect) -> RawExpect {
        match expect {
            Expect::Safe => RawExpect::Word("safe".into()),
            Expect::Findings(findings) => RawExpect::List(findings.iter().map(|f| f.name().to_string()).collect()),
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Safe => f.write_str("safe"),
            Expect::Findings(findings) => {
                let names: Vec<&str> = findings.iter().map(|finding| finding.name()).collect();
                f.write_str(&names.join(", "))
            }
        }
    }
}

/// Something a run can show: a broken property, or stale writes that the
/// fence rejected (not a violation, but a scenario may require it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Finding {
    /// A property was broken.
    Violation(Property),
    /// A leader's writes arrived after its term and the fence rejected
    /// every one of them.
    StaleWritesRejected,
    /// An older term's writes were accepted after a newer term began,
    /// because it had not written yet. Reported, never a violation.
    StaleWritesAccepted,
}

impl Finding {
    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Finding::Violation(property) => property.name(),
            Finding::StaleWritesRejected => "stale-writes-rejected",
            Finding::StaleWritesAccepted => "stale-writes-accepted",
        }
    }

    /// What it looks like, in words.
    pub fn summary(self) -> &'static str {
        match self {
            Finding::Violation(property) => property.summary(),
            Finding::StaleWritesRejected => "stale writes, all rejected by the fence",
            Finding::StaleWritesAccepted => "stale writes accepted before the newer term wrote",
        }
    }

    /// Every finding, in report order.
    pub fn all() -> Vec<Finding> {
        let mut all: Vec<Finding> = Property::ALL.into_iter().map(Finding::Violation).collect();
        all.push(Finding::StaleWritesRejected);
        all.push(Finding::StaleWritesAccepted);
        all
    }

    /// Whether it is a broken property.
    pub fn is_violation(self) -> bool {
        matches!(self, Finding::Violation(_))
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Finding {
    type Err = String;

    fn from_str(name: &str) -> Result<Finding, String> {
        Finding::all().into_iter().find(|finding| finding.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Finding::all().into_iter().map(Finding::name).collect();
            format!("unknown finding {name:?}; known: {}", known.join(", "))
        })
    }
}

impl TryFrom<String> for Finding {
    type Error = String;

    fn try_from(name: String) -> Result<Finding, String> {
        name.parse()
    }
}

impl From<Finding> for String {
    fn from(finding: Finding) -> String {
        finding.name().to_string()
    }
}
