//! Where S3 credentials come from: given explicitly, from the standard
//! `AWS_*` environment variables, or from a profile in the shared
//! credentials file.

use std::path::{Path, PathBuf};

use super::sigv4::Credentials;
use crate::backend::BackendError;

/// How to find credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CredentialSource {
    /// These credentials.
    Explicit(Credentials),
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and
    /// `AWS_SESSION_TOKEN`) if set, otherwise the profile named by
    /// `AWS_PROFILE` (or `default`) in the shared credentials file
    /// (`AWS_SHARED_CREDENTIALS_FILE`, or `~/.aws/credentials`).
    #[default]
    Default,
    /// A named profile in the shared credentials file.
    Profile(String),
}

impl CredentialSource {
    /// Resolves the credentials from the process environment.
    pub fn resolve(&self) -> Result<Credentials, BackendError> {
        self.resolve_with(&|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
    }

    /// Resolves the credentials, reading variables through `env`.
    pub fn resolve_with(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Credentials, BackendError> {
        match self {
            CredentialSource::Explicit(credentials) => Ok(credentials.clone()),
            CredentialSource::Profile(name) => from_profile(&credentials_file(env)?, name),
            CredentialSource::Default => {
                if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                    let credentials = Credentials::new(id, secret);
                    return Ok(match env("AWS_SESSION_TOKEN") {
                        Some(token) => credentials.with_session_token(token),
                        None => credentials,
                    });
                }
                let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
                let file = credentials_file(env)?;
                if !file.exists() {
                    return Err(BackendError::Config(format!(
                        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or create profile \
                         [{profile}] in {}",
                        file.display()
                    )));
                }
                from_profile(&file, &profile)
            }
        }
    }
}

fn credentials_file(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, BackendError> {
    if let Some(file) = env("AWS_SHARED_CREDENTIALS_FILE") {
        return Ok(PathBuf::from(file));
    }
    let home = env("HOME")
        .ok_or_else(|| BackendError::Config("no S3 credentials: neither AWS_ACCESS_KEY_ID nor HOME is set".into()))?;
    Ok(Path::new(&home).join(".aws").join("credentials"))
}

/// Reads profile `name` from an INI-style shared credentials file.
fn from_profile(file: &Path, name: &str) -> Result<Credentials, BackendError> {
    let text = std::fs::read_to_string(file)
        .map_err(|err| BackendError::Config(format!("cannot read the credentials file {}: {err}", file.display())))?;
    parse_profile(&text, name).ok_or_else(|| {
        BackendError::Config(format!(
            "profile [{name}] in {} has no aws_access_key_id and aws_secret_access_key",
            file.display()
        ))
    })
}

fn parse_profile(text: &str, name: &str) -> Option<Credentials> {
    let (mut id, mut secret, mut token) = (None, None, None);
    let mut in_profile = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            in_profile = section.trim() == name;
            continue;
        }
        if !in_profile {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().to_string();
            match key.trim() {
                "aws_access_key_id" => id = Some(value),
                "aws_secret_access_key" => secret = Some(value),
                "aws_session_token" => token = Some(value),
                _ => {}
            }
        }
    }
    let credentials = Credentials::new(id?, secret?);
    Some(match token {
        Some(token) => credentials.with_session_token(token),
        None => credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn environment_comes_first() {
        let vars = [("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "SK"), ("AWS_SESSION_TOKEN", "T")];
        let credentials = CredentialSource::Default.resolve_with(&env(&vars)).unwrap();
        assert_eq!(credentials, Credentials::new("AK", "SK").with_session_token("T"));
    }

    #[test]
    fn profiles_are_read_from_the_shared_file() {
        let dir = std::env::temp_dir().join(format!("hoplock-credentials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n# comment\n[work]\naws_access_key_id=W\naws_secret_access_key=WS\n",
        )
        .unwrap();
        let path = file.to_string_lossy().to_string();
        let vars = [("AWS_SHARED_CREDENTIALS_FILE", path.as_str()), ("AWS_PROFILE", "work")];
        assert_eq!(CredentialSource::Default.resolve_with(&env(&vars)).unwrap(), Credentials::new("W", "WS"));
        let vars = [("AWS_SHARED_CREDENTIALS_FILE", path.as_str())];
        assert_eq!(CredentialSource::Default.resolve_with(&env(&vars)).unwrap(), Credentials::new("D", "DS"));
        let missing = CredentialSource::Profile("nope".into()).resolve_with(&env(&vars)).unwrap_err();
        assert!(missing.to_string().contains("[nope]"), "{missing}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn no_credentials_is_a_clear_error() {
        let vars = [("HOME", "/nonexistent-home")];
        let err = CredentialSource::Default.resolve_with(&env(&vars)).unwrap_err();
        assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
    }
}
