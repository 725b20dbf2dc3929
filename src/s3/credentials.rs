//! Where S3 credentials come from, in the order the AWS SDKs try them.
//!
//! [`CredentialSource::Default`] is the chain:
//!
//! 1. The environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//!    `AWS_SESSION_TOKEN`.
//! 2. The shared files (`AWS_CONFIG_FILE`, default `~/.aws/config`;
//!    `AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`), profile
//!    `AWS_PROFILE` or `default`: static keys, `role_arn` with
//!    `source_profile` or `credential_source` (STS `AssumeRole`),
//!    `role_arn` with `web_identity_token_file`, or `credential_process`.
//! 3. Web identity: `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`,
//!    `AWS_ROLE_SESSION_NAME` (EKS IAM roles for service accounts).
//! 4. Container credentials: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN` or `_FILE` (ECS, EKS Pod Identity).
//! 5. EC2 instance metadata with IMDSv2 tokens
//!    (`AWS_EC2_METADATA_SERVICE_ENDPOINT`; `AWS_EC2_METADATA_DISABLED=true`
//!    skips it). One attempt with a one-second deadline, so it fails fast
//!    off EC2.
//!
//! STS calls go to `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, or
//! `https://sts.<region>.amazonaws.com`, the region being `AWS_REGION`,
//! `AWS_DEFAULT_REGION`, the profile's `region`, or the bucket's.
//!
//! AWS IAM Identity Center (SSO) profiles are not read: run
//! `aws configure export-credentials` from a `credential_process`, or use
//! one of the sources above.
//!
//! Keys that expire are refreshed in the background ahead of expiry; no
//! request waits for a refresh (see `refresh`). Secrets never appear in
//! `Debug` output or logs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::sigv4::Credentials;
use crate::backend::BackendError;

mod profile;
pub(crate) mod providers;
pub(crate) mod refresh;

use profile::Profiles;
use providers::{Provider, Sts};

/// How deep `source_profile` chains may go before they count as a loop.
const MAX_PROFILE_DEPTH: usize = 5;

/// How to find credentials.
///
/// ```
/// use hoplock::s3::credentials::CredentialSource;
/// use hoplock::s3::sigv4::Credentials;
///
/// // The SDKs' chain, as on AWS: environment, profiles, web identity,
/// // container, instance metadata.
/// let chain = CredentialSource::Default;
/// // Or fixed keys, which are never refreshed.
/// let fixed = CredentialSource::Explicit(Credentials::new("AKID", "wJalrXUtnFEMI-EXAMPLE"));
/// assert!(!format!("{fixed:?}").contains("wJalrXUtnFEMI"));
/// # let _ = chain;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CredentialSource {
    /// These credentials, never refreshed.
    Explicit(Credentials),
    /// The chain described in the module docs.
    #[default]
    Default,
    /// A named profile in the shared config and credentials files.
    Profile(String),
}

impl CredentialSource {
    /// Where the credentials would come from in this process's
    /// environment, as a description for logs (`"the environment"`,
    /// `"role … assumed with keys from profile base"`, ...). Reads the
    /// shared files; fetches nothing.
    pub fn describe(&self, region: &str) -> Result<String, BackendError> {
        Ok(self.provider(region)?.describe())
    }

    pub(crate) fn provider(&self, region: &str) -> Result<Provider, BackendError> {
        self.provider_with(region, &|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
    }

    /// Resolves which source applies, reading variables through `env`.
    pub(crate) fn provider_with(
        &self,
        region: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, BackendError> {
        let config = |message: String| BackendError::Config(message);
        match self {
            CredentialSource::Explicit(credentials) => {
                Ok(Provider::Static { credentials: credentials.clone(), origin: "the given keys".into() })
            }
            CredentialSource::Profile(name) => {
                let profiles = Profiles::load(env).map_err(config)?;
                from_profile(&profiles, name, env, region, 0).map_err(config)
            }
            CredentialSource::Default => default_chain(env, region).map_err(config),
        }
    }
}

fn default_chain(env: &dyn Fn(&str) -> Option<String>, region: &str) -> Result<Provider, String> {
    if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Ok(Provider::Static {
            credentials: keys(id, secret, env("AWS_SESSION_TOKEN")),
            origin: "the environment".into(),
        });
    }
    let profiles = Profiles::load(env)?;
    match env("AWS_PROFILE") {
        // A profile named on purpose must exist.
        Some(name) => return from_profile(&profiles, &name, env, region, 0),
        None if profiles.get("default").is_some() => return from_profile(&profiles, "default", env, region, 0),
        None => {}
    }
    if let (Some(token_file), Some(role_arn)) = (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
        return Ok(Provider::WebIdentity {
            token_file: PathBuf::from(token_file),
            role_arn,
            session_name: env("AWS_ROLE_SESSION_NAME").unwrap_or_else(session_name),
            sts: sts(env, None, region),
        });
    }
    if let Some(container) = container(env)? {
        return Ok(container);
    }
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
        return Err(format!(
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, set AWS_PROFILE or create profile \
             [default] ({}), or run where web identity, container or instance credentials are provided \
             (EC2 instance metadata is disabled by AWS_EC2_METADATA_DISABLED)",
            profiles.where_()
        ));
    }
    Ok(instance_metadata(env))
}

/// The EC2 instance metadata service, at `AWS_EC2_METADATA_SERVICE_ENDPOINT`
/// or its link-local address.
fn instance_metadata(env: &dyn Fn(&str) -> Option<String>) -> Provider {
    let endpoint = env("AWS_EC2_METADATA_SERVICE_ENDPOINT").unwrap_or_else(|| "http://169.254.169.254".into());
    Provider::InstanceMetadata { endpoint }
}

/// Container credentials, if the environment names an endpoint.
fn container(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Provider>, String> {
    let url = if let Some(relative) = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        format!("http://169.254.170.2{relative}")
    } else if let Some(full) = env("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
        let uri: http::Uri =
            full.parse().map_err(|err| format!("AWS_CONTAINER_CREDENTIALS_FULL_URI {full:?} is not a URL: {err}"))?;
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        // Keys must not travel in the clear to anywhere but the local agents
        // AWS runs, as the SDKs require.
        let local = host == "localhost"
            || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            || matches!(host, "169.254.170.2" | "169.254.170.23" | "fd00:ec2::23");
        if uri.scheme_str() != Some("https") && !local {
            return Err(format!(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI {full:?} must use https, or http to a loopback address or \
                 the ECS / EKS Pod Identity agent"
            ));
        }
        full
    } else {
        return Ok(None);
    };
    Ok(Some(Provider::Container {
        url,
        token: env("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        token_file: env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").map(PathBuf::from),
    }))
}

/// Static keys from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
/// `AWS_SESSION_TOKEN`, if the first two are set.
fn from_environment(env: &dyn Fn(&str) -> Option<String>) -> Option<Provider> {
    let (id, secret) = (env("AWS_ACCESS_KEY_ID")?, env("AWS_SECRET_ACCESS_KEY")?);
    Some(Provider::Static { credentials: keys(id, secret, env("AWS_SESSION_TOKEN")), origin: "the environment".into() })
}

fn keys(id: String, secret: String, token: Option<String>) -> Credentials {
    let credentials = Credentials::new(id, secret);
    match token {
        Some(token) => credentials.with_session_token(token),
        None => credentials,
    }
}

/// A session name for STS when none is configured. CloudTrail shows it, so
/// it says who made the call.
fn session_name() -> String {
    format!("hoplock-{}", crate::entropy::random_hex(&crate::entropy::OsEntropy, 6))
}

fn sts(env: &dyn Fn(&str) -> Option<String>, section: Option<&BTreeMap<String, String>>, region: &str) -> Sts {
    let region = env("AWS_REGION")
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| section.and_then(|section| section.get("region").cloned()))
        .unwrap_or_else(|| region.to_string());
    let endpoint = env("AWS_ENDPOINT_URL_STS")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
    Sts { endpoint, region }
}

/// The source profile `name` describes.
fn from_profile(
    profiles: &Profiles,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    region: &str,
    depth: usize,
) -> Result<Provider, String> {
    if depth >= MAX_PROFILE_DEPTH {
        return Err(format!("profile [{name}]: source_profile chains deeper than {MAX_PROFILE_DEPTH} (a loop?)"));
    }
    let Some(section) = profiles.get(name) else {
        return Err(format!("no profile [{name}] in the shared config or credentials file ({})", profiles.where_()));
    };
    let get = |key: &str| section.get(key).cloned();
    let static_keys = match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(id), Some(secret)) => Some(Provider::Static {
            credentials: keys(id, secret, get("aws_session_token")),
            origin: format!("profile {name}"),
        }),
        _ => None,
    };
    if let Some(role_arn) = get("role_arn") {
        let session_name = get("role_session_name").unwrap_or_else(session_name);
        if let Some(token_file) = get("web_identity_token_file") {
            return Ok(Provider::WebIdentity {
                token_file: PathBuf::from(token_file),
                role_arn,
                session_name,
                sts: sts(env, Some(section), region),
            });
        }
        let source = match (get("source_profile"), get("credential_source")) {
            // A profile may name itself as the source of its own static keys.
            (Some(source), _) if source == name => static_keys
                .ok_or_else(|| format!("profile [{name}] is its own source_profile but has no static keys"))?,
            (Some(source), _) => from_profile(profiles, &source, env, region, depth + 1)?,
            (None, Some(kind)) => match kind.as_str() {
                "Environment" => from_environment(env).ok_or_else(|| {
                    format!("profile [{name}]: credential_source = Environment, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
                })?,
                "Ec2InstanceMetadata" => instance_metadata(env),
                "EcsContainer" => container(env)?.ok_or_else(|| {
                    format!("profile [{name}]: credential_source = EcsContainer, but no container credentials endpoint is set")
                })?,
                other => return Err(format!("profile [{name}]: unknown credential_source {other:?}")),
            },
            (None, None) => {
                return Err(format!("profile [{name}] has role_arn but neither source_profile nor credential_source"));
            }
        };
        let duration_seconds = match get("duration_seconds") {
            Some(text) => Some(
                text.parse::<u32>()
                    .map_err(|_| format!("profile [{name}]: duration_seconds {text:?} is not a whole number"))?,
            ),
            None => None,
        };
        return Ok(Provider::AssumeRole {
            role_arn,
            session_name,
            external_id: get("external_id"),
            duration_seconds,
            source: Box::new(source),
            sts: sts(env, Some(section), region),
        });
    }
    if let Some(provider) = static_keys {
        return Ok(provider);
    }
    if let Some(command) = get("credential_process") {
        return Ok(Provider::Process { command, origin: format!("profile {name} (credential_process)") });
    }
    if section.contains_key("sso_start_url") || section.contains_key("sso_session") {
        return Err(format!(
            "profile [{name}] uses AWS IAM Identity Center (SSO), which hoplock does not read; \
             use credential_process = aws configure export-credentials --profile {name} --format process"
        ));
    }
    Err(format!(
        "profile [{name}] has no aws_access_key_id and aws_secret_access_key, role_arn or credential_process ({})",
        profiles.where_()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn resolve(source: &CredentialSource, vars: &[(&str, &str)]) -> Result<Provider, BackendError> {
        source.provider_with("us-east-1", &env(vars))
    }

    fn static_keys(provider: &Provider) -> &Credentials {
        match provider {
            Provider::Static { credentials, .. } => credentials,
            other => panic!("expected static keys, got {other:?}"),
        }
    }

    /// A directory with a config and a credentials file, removed on drop.
    struct Files(PathBuf);

    impl Files {
        fn new(tag: &str, config: &str, credentials: &str) -> Files {
            let dir = std::env::temp_dir().join(format!("hoplock-credentials-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("config"), config).unwrap();
            std::fs::write(dir.join("credentials"), credentials).unwrap();
            Files(dir)
        }

        fn config(&self) -> String {
            self.0.join("config").to_string_lossy().into_owned()
        }

        fn credentials(&self) -> String {
            self.0.join("credentials").to_string_lossy().into_owned()
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }

    #[test]
    fn environment_comes_first() {
        let vars = [("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "SK"), ("AWS_SESSION_TOKEN", "T")];
        let provider = resolve(&CredentialSource::Default, &vars).unwrap();
        assert_eq!(static_keys(&provider), &Credentials::new("AK", "SK").with_session_token("T"));
        assert!(!provider.refreshes());
    }

    #[test]
    fn profiles_are_read_from_both_shared_files() {
        let files = Files::new(
            "profiles",
            "[profile work]\nregion = eu-west-1\n",
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n# comment\n[work]\naws_access_key_id=W\naws_secret_access_key=WS\n",
        );
        let (config, credentials) = (files.config(), files.credentials());
        let base = [("AWS_CONFIG_FILE", config.as_str()), ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_str())];
        let with_profile = [base[0], base[1], ("AWS_PROFILE", "work")];
        assert_eq!(
            static_keys(&resolve(&CredentialSource::Default, &with_profile).unwrap()),
            &Credentials::new("W", "WS")
        );
        assert_eq!(static_keys(&resolve(&CredentialSource::Default, &base).unwrap()), &Credentials::new("D", "DS"));
        let missing = resolve(&CredentialSource::Profile("nope".into()), &base).unwrap_err();
        assert!(missing.to_string().contains("[nope]"), "{missing}");
        // A profile named on purpose must exist, even if other sources would do.
        let named = [base[0], base[1], ("AWS_PROFILE", "nope"), ("AWS_EC2_METADATA_DISABLED", "true")];
        assert!(resolve(&CredentialSource::Default, &named).unwrap_err().to_string().contains("[nope]"));
    }

    #[test]
    fn role_profiles_assume_the_role_with_their_source() {
        let files = Files::new(
            "roles",
            "[profile deploy]\nrole_arn = arn:aws:iam::1:role/deploy\nsource_profile = base\nexternal_id = x\n\
             duration_seconds = 900\nregion = eu-west-2\n\
             [profile pod]\nrole_arn = arn:aws:iam::1:role/pod\nweb_identity_token_file = /var/token\n\
             [profile tool]\ncredential_process = /bin/tool --json\n\
             [profile loop]\nrole_arn = r\nsource_profile = loop2\n[profile loop2]\nrole_arn = r\nsource_profile = loop\n\
             [profile sso]\nsso_start_url = https://x\n",
            "[base]\naws_access_key_id = B\naws_secret_access_key = BS\n",
        );
        let (config, credentials) = (files.config(), files.credentials());
        let base = [("AWS_CONFIG_FILE", config.as_str()), ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_str())];
        let profile = |name: &str| resolve(&CredentialSource::Profile(name.into()), &base);
        match profile("deploy").unwrap() {
            Provider::AssumeRole { role_arn, external_id, duration_seconds, source, sts, .. } => {
                assert_eq!(role_arn, "arn:aws:iam::1:role/deploy");
                assert_eq!((external_id.as_deref(), duration_seconds), (Some("x"), Some(900)));
                assert_eq!(static_keys(&source), &Credentials::new("B", "BS"));
                assert_eq!(sts.endpoint, "https://sts.eu-west-2.amazonaws.com");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(profile("pod").unwrap(), Provider::WebIdentity { .. }));
        assert!(matches!(profile("tool").unwrap(), Provider::Process { command, .. } if command == "/bin/tool --json"));
        assert!(profile("loop").unwrap_err().to_string().contains("loop"));
        assert!(profile("sso").unwrap_err().to_string().contains("SSO"));
        let overridden = [base[0], base[1], ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:1")];
        match resolve(&CredentialSource::Profile("deploy".into()), &overridden).unwrap() {
            Provider::AssumeRole { sts, .. } => assert_eq!(sts.endpoint, "http://127.0.0.1:1"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_chain_goes_on_to_web_identity_container_and_instance_metadata() {
        let none = [("HOME", "/nonexistent-home")];
        let web =
            [none[0], ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"), ("AWS_ROLE_ARN", "arn:r"), ("AWS_ROLE_SESSION_NAME", "s")];
        assert!(matches!(resolve(&CredentialSource::Default, &web).unwrap(),
            Provider::WebIdentity { session_name, .. } if session_name == "s"));
        let relative = [
            none[0],
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok"),
        ];
        assert!(matches!(resolve(&CredentialSource::Default, &relative).unwrap(),
            Provider::Container { url, token: Some(_), .. } if url == "http://169.254.170.2/v2/creds"));
        let full = [none[0], ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds")];
        assert!(matches!(resolve(&CredentialSource::Default, &full).unwrap(), Provider::Container { .. }));
        let remote = [none[0], ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds")];
        assert!(resolve(&CredentialSource::Default, &remote).unwrap_err().to_string().contains("https"));
        let imds = [none[0], ("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:7")];
        assert!(matches!(resolve(&CredentialSource::Default, &imds).unwrap(),
            Provider::InstanceMetadata { endpoint } if endpoint == "http://127.0.0.1:7"));
        assert!(matches!(resolve(&CredentialSource::Default, &none).unwrap(), Provider::InstanceMetadata { .. }));
    }

    #[test]
    fn no_credentials_is_a_clear_error() {
        let vars = [("HOME", "/nonexistent-home"), ("AWS_EC2_METADATA_DISABLED", "true")];
        let err = resolve(&CredentialSource::Default, &vars).unwrap_err();
        assert!(err.is_fatal());
        assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
    }
}
