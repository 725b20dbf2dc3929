//! The AWS shared configuration files: `~/.aws/config` (sections
//! `[profile NAME]` and `[default]`) and `~/.aws/credentials` (sections
//! `[NAME]`), merged into one table of profiles.
//!
//! Only flat `key = value` lines are read. Indented lines are the nested
//! settings some tools write under a key (`s3 =` followed by indented
//! options); none of them name credentials, so they are skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every profile found, by name, with its settings.
#[derive(Debug, Default)]
pub(super) struct Profiles {
    sections: BTreeMap<String, BTreeMap<String, String>>,
    /// The files read, for error messages.
    pub(super) files: Vec<PathBuf>,
}

impl Profiles {
    /// Reads both files, where they exist. The credentials file wins where
    /// both set the same key of the same profile, as in the AWS SDKs.
    pub(super) fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<Profiles, String> {
        let home = env("HOME").map(PathBuf::from);
        let path = |variable: &str, default: &str| -> Option<PathBuf> {
            env(variable).map(PathBuf::from).or_else(|| home.as_ref().map(|home| home.join(".aws").join(default)))
        };
        let mut profiles = Profiles::default();
        if let Some(config) = path("AWS_CONFIG_FILE", "config") {
            profiles.read(&config, true)?;
        }
        if let Some(credentials) = path("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
            profiles.read(&credentials, false)?;
        }
        Ok(profiles)
    }

    fn read(&mut self, file: &Path, is_config: bool) -> Result<(), String> {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(format!("cannot read {}: {err}", file.display())),
        };
        self.files.push(file.to_path_buf());
        self.parse(&text, is_config);
        Ok(())
    }

    pub(super) fn parse(&mut self, text: &str, is_config: bool) {
        let mut current: Option<String> = None;
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(section) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
                let section = section.trim();
                current = if !is_config {
                    Some(section.to_string())
                } else if section == "default" {
                    Some("default".into())
                } else {
                    // `[sso-session x]` and `[services x]` are not profiles.
                    section.strip_prefix("profile ").map(|name| name.trim().to_string())
                };
                continue;
            }
            if raw.starts_with(char::is_whitespace) {
                continue;
            }
            let (Some(profile), Some((key, value))) = (&current, line.split_once('=')) else {
                continue;
            };
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            self.sections.entry(profile.clone()).or_default().insert(key.trim().to_lowercase(), value.to_string());
        }
    }

    /// The settings of profile `name`, if any file has it.
    pub(super) fn get(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.sections.get(name)
    }

    /// The files read, for messages: "in ~/.aws/config and ~/.aws/credentials".
    pub(super) fn where_(&self) -> String {
        if self.files.is_empty() {
            return "no shared config or credentials file exists".into();
        }
        let names: Vec<String> = self.files.iter().map(|file| file.display().to_string()).collect();
        format!("read {}", names.join(" and "))
    }
}

/// Splits a `credential_process` command line into words, as a POSIX
/// shell would without expanding anything: single quotes keep everything,
/// double quotes keep everything but backslash escapes, a backslash outside
/// quotes keeps the next character.
pub(super) fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unclosed single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unclosed double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unclosed double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("a trailing backslash".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("the command is empty".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_sections_are_named_profile_and_credentials_win() {
        let mut profiles = Profiles::default();
        profiles.parse(
            "[default]\nregion = eu-west-1\n[profile work]\nrole_arn = arn:aws:iam::1:role/r\n\
             source_profile = base\ns3 =\n  max_concurrent_requests = 4\n[sso-session x]\nsso_region = a\n",
            true,
        );
        profiles.parse("[base]\naws_access_key_id = A\naws_secret_access_key = S\n[work]\nrole_arn = other\n", false);
        assert_eq!(profiles.get("default").unwrap()["region"], "eu-west-1");
        assert_eq!(profiles.get("work").unwrap()["role_arn"], "other");
        assert_eq!(profiles.get("work").unwrap()["source_profile"], "base");
        assert!(!profiles.get("work").unwrap().contains_key("max_concurrent_requests"));
        assert!(profiles.get("x").is_none() && profiles.get("sso-session x").is_none());
        assert_eq!(profiles.get("base").unwrap()["aws_access_key_id"], "A");
    }

    #[test]
    fn commands_split_like_a_shell_without_expansion() {
        assert_eq!(split_words("a b  c").unwrap(), ["a", "b", "c"]);
        assert_eq!(
            split_words(r#"/bin/tool --name 'two words' "x \"y\"" a\ b $HOME"#).unwrap(),
            ["/bin/tool", "--name", "two words", "x \"y\"", "a b", "$HOME"]
        );
        assert!(split_words("a 'b").is_err());
        assert!(split_words("   ").is_err());
    }
}
