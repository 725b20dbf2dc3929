//! The credential sources themselves: how each one hands out a set of keys.
//!
//! Every fetch is one attempt with its own deadline. Retrying, and deciding
//! when to fetch again, is the cache's business ([`super::refresh`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response};

use super::profile::split_words;
use crate::clock::Clock;
use crate::s3::sigv4::{Credentials, sign_for_service};
use crate::s3::transport::{HttpTransport, TransportErrorKind};
use crate::s3::xml::element;

/// How long one request to STS or a container endpoint may take.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request to the EC2 instance metadata service may take. Off
/// EC2 nothing answers at that address, so this is kept short and tried
/// once, or every laptop and CI run would stall on it.
const METADATA_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a `credential_process` command may run.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Keys as a source handed them out, with their expiry if they have one.
#[derive(Clone, Debug)]
pub(crate) struct Fetched {
    pub(crate) credentials: Credentials,
    pub(crate) expires: Option<SystemTime>,
}

/// Why a source could not hand out keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FetchError {
    pub(crate) message: String,
    /// True when trying again cannot help without a person: a missing file,
    /// a role that does not exist, a refused token. False for trouble that
    /// may pass (a timeout, a 5xx).
    pub(crate) lasting: bool,
}

impl FetchError {
    fn lasting(message: impl Into<String>) -> FetchError {
        FetchError { message: message.into(), lasting: true }
    }

    fn passing(message: impl Into<String>) -> FetchError {
        FetchError { message: message.into(), lasting: false }
    }
}

/// Where STS is and which region to sign for.
#[derive(Clone, Debug)]
pub(crate) struct Sts {
    pub(crate) endpoint: String,
    pub(crate) region: String,
}

/// A resolved credential source.
#[derive(Clone)]
pub(crate) enum Provider {
    /// Keys known up front: given, from the environment, or from a profile.
    Static { credentials: Credentials, origin: String },
    /// A profile's `credential_process` command.
    Process { command: String, origin: String },
    /// STS `AssumeRole`, signed with the keys of another source.
    AssumeRole {
        role_arn: String,
        session_name: String,
        external_id: Option<String>,
        duration_seconds: Option<u32>,
        source: Box<Provider>,
        sts: Sts,
    },
    /// STS `AssumeRoleWithWebIdentity` with a token file (EKS IRSA).
    WebIdentity { token_file: PathBuf, role_arn: String, session_name: String, sts: Sts },
    /// The ECS or EKS Pod Identity credentials endpoint.
    Container { url: String, token: Option<String>, token_file: Option<PathBuf> },
    /// The EC2 instance metadata service, with IMDSv2 session tokens.
    InstanceMetadata { endpoint: String },
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only where the keys come from; never the keys or tokens.
        f.write_str(&self.describe())
    }
}

impl Provider {
    /// Where the keys come from, for logs and errors.
    pub(crate) fn describe(&self) -> String {
        match self {
            Provider::Static { origin, .. } => origin.clone(),
            Provider::Process { origin, .. } => origin.clone(),
            Provider::AssumeRole { role_arn, source, .. } => {
                format!("role {role_arn} assumed with keys from {}", source.describe())
            }
            Provider::WebIdentity { role_arn, token_file, .. } => {
                format!("role {role_arn} assumed with the web identity token in {}", token_file.display())
            }
            Provider::Container { url, .. } => format!("the container credentials endpoint {url}"),
            Provider::InstanceMetadata { endpoint } => format!("the EC2 instance metadata service at {endpoint}"),
        }
    }

    /// Whether the keys can change: everything but keys known up front.
    pub(crate) fn refreshes(&self) -> bool {
        !matches!(self, Provider::Static { .. })
    }

    /// One attempt at getting keys.
    pub(crate) fn fetch<'a>(
        &'a self,
        http: &'a Arc<dyn HttpTransport>,
        clock: &'a Arc<dyn Clock>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Fetched, FetchError>> + Send + 'a>> {
        // Boxed because `AssumeRole` fetches its source's keys first.
        Box::pin(async move {
            match self {
                Provider::Static { credentials, .. } => Ok(Fetched { credentials: credentials.clone(), expires: None }),
                Provider::Process { command, .. } => run_process(command, clock).await,
                Provider::AssumeRole { role_arn, session_name, external_id, duration_seconds, source, sts } => {
                    let source_keys = source.fetch(http, clock).await.map_err(|err| FetchError {
                        message: format!("the keys to assume {role_arn} with: {}", err.message),
                        lasting: err.lasting,
                    })?;
                    let mut form = vec![
                        ("Action", "AssumeRole".to_string()),
                        ("Version", "2011-06-15".to_string()),
                        ("RoleArn", role_arn.clone()),
                        ("RoleSessionName", session_name.clone()),
                    ];
                    if let Some(external_id) = external_id {
                        form.push(("ExternalId", external_id.clone()));
                    }
                    if let Some(seconds) = duration_seconds {
                        form.push(("DurationSeconds", seconds.to_string()));
                    }
                    let mut request = sts_request(sts, &form)?;
                    sign_for_service(&mut request, &source_keys.credentials, &sts.region, "sts", clock.wall())
                        .map_err(|err| FetchError::lasting(format!("cannot sign the AssumeRole call: {err}")))?;
                    let response = send(http, clock, request, REMOTE_TIMEOUT, "STS").await?;
                    sts_answer(&response, "AssumeRole", role_arn)
                }
                Provider::WebIdentity { token_file, role_arn, session_name, sts } => {
                    // Read on every fetch: the kubelet rotates the token.
                    let token = std::fs::read_to_string(token_file).map_err(|err| {
                        FetchError::lasting(format!(
                            "cannot read the web identity token file {}: {err}",
                            token_file.display()
                        ))
                    })?;
                    let form = [
                        ("Action", "AssumeRoleWithWebIdentity".to_string()),
                        ("Version", "2011-06-15".to_string()),
                        ("RoleArn", role_arn.clone()),
                        ("RoleSessionName", session_name.clone()),
                        ("WebIdentityToken", token.trim().to_string()),
                    ];
                    // Unsigned: the token is the proof of identity.
                    let request = sts_request(sts, &form)?;
                    let response = send(http, clock, request, REMOTE_TIMEOUT, "STS").await?;
                    sts_answer(&response, "AssumeRoleWithWebIdentity", role_arn)
                }
                Provider::Container { url, token, token_file } => {
                    let mut request = Request::builder().method(Method::GET).uri(url.as_str());
                    let token = match (token, token_file) {
                        (_, Some(file)) => Some(std::fs::read_to_string(file).map_err(|err| {
                            FetchError::lasting(format!(
                                "cannot read the container authorization token file {}: {err}",
                                file.display()
                            ))
                        })?),
                        (Some(token), None) => Some(token.clone()),
                        (None, None) => None,
                    };
                    if let Some(token) = token {
                        request = request.header("authorization", token.trim());
                    }
                    let request = request
                        .body(Bytes::new())
                        .map_err(|err| FetchError::lasting(format!("bad container credentials URL {url}: {err}")))?;
                    let response =
                        send(http, clock, request, REMOTE_TIMEOUT, "the container credentials endpoint").await?;
                    if !response.status().is_success() {
                        return Err(status_error("the container credentials endpoint", &response));
                    }
                    json_keys(response.body(), "Token", "the container credentials endpoint")
                }
                Provider::InstanceMetadata { endpoint } => instance_metadata(endpoint, http, clock).await,
            }
        })
    }
}

/// A form-encoded STS Query API call.
fn sts_request(sts: &Sts, form: &[(&str, String)]) -> Result<Request<Bytes>, FetchError> {
    let body: Vec<String> = form.iter().map(|(name, value)| format!("{name}={}", form_encode(value))).collect();
    Request::builder()
        .method(Method::POST)
        .uri(sts.endpoint.as_str())
        .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
        .body(Bytes::from(body.join("&")))
        .map_err(|err| FetchError::lasting(format!("bad STS endpoint {}: {err}", sts.endpoint)))
}

/// Percent-encodes everything but the unreserved characters of RFC 3986.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Reads the keys out of an STS answer.
fn sts_answer(response: &Response<Bytes>, action: &str, role_arn: &str) -> Result<Fetched, FetchError> {
    let text = String::from_utf8_lossy(response.body());
    if !response.status().is_success() {
        let code = element(&text, "Code").unwrap_or_default();
        let message = element(&text, "Message").unwrap_or_default();
        let status = response.status().as_u16();
        let detail = format!("STS {action} for {role_arn} answered HTTP {status} {code}: {message}");
        // Throttling and server trouble pass; a refused role or token does not.
        let passing = status >= 500 || status == 429 || code.contains("Throttl") || code == "IDPCommunicationError";
        return Err(if passing { FetchError::passing(detail) } else { FetchError::lasting(detail) });
    }
    let field = |name: &str| {
        element(&text, name)
            .filter(|value| !value.is_empty())
            .ok_or_else(|| FetchError::passing(format!("the STS {action} answer for {role_arn} has no <{name}>")))
    };
    let credentials =
        Credentials::new(field("AccessKeyId")?, field("SecretAccessKey")?).with_session_token(field("SessionToken")?);
    let expires = crate::rfc3339::parse(&field("Expiration")?)
        .map_err(|err| FetchError::passing(format!("the STS {action} answer has a bad <Expiration>: {err}")))?;
    Ok(Fetched { credentials, expires: Some(expires) })
}

/// Reads `{"AccessKeyId", "SecretAccessKey", <token field>, "Expiration"}`.
fn json_keys(body: &[u8], token_field: &str, from: &str) -> Result<Fetched, FetchError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|err| FetchError::passing(format!("{from} did not answer with JSON: {err}")))?;
    let text = |name: &str| value.get(name).and_then(serde_json::Value::as_str).filter(|text| !text.is_empty());
    let (Some(id), Some(secret)) = (text("AccessKeyId"), text("SecretAccessKey")) else {
        return Err(FetchError::passing(format!("{from} answered without AccessKeyId and SecretAccessKey")));
    };
    let mut credentials = Credentials::new(id, secret);
    if let Some(token) = text(token_field) {
        credentials = credentials.with_session_token(token);
    }
    let expires = match text("Expiration") {
        Some(expiration) => Some(
            crate::rfc3339::parse(expiration)
                .map_err(|err| FetchError::passing(format!("{from} gave a bad Expiration {expiration:?}: {err}")))?,
        ),
        None => None,
    };
    Ok(Fetched { credentials, expires })
}

fn status_error(from: &str, response: &Response<Bytes>) -> FetchError {
    let status = response.status().as_u16();
    let body = String::from_utf8_lossy(response.body());
    let body: String = body.chars().take(200).collect();
    let detail = format!("{from} answered HTTP {status}: {body}");
    if status >= 500 || status == 429 { FetchError::passing(detail) } else { FetchError::lasting(detail) }
}

/// Sends one request with a deadline.
async fn send(
    http: &Arc<dyn HttpTransport>,
    clock: &Arc<dyn Clock>,
    request: Request<Bytes>,
    timeout: Duration,
    to: &str,
) -> Result<Response<Bytes>, FetchError> {
    let deadline = clock.now() + timeout;
    tokio::select! {
        biased;
        result = http.send(request) => result.map_err(|err| match err.kind {
            TransportErrorKind::Config => FetchError::lasting(format!("cannot send a request to {to}: {}", err.message)),
            _ => FetchError::passing(format!("cannot reach {to}: {}", err.message)),
        }),
        () = clock.sleep_until(deadline) => Err(FetchError::passing(format!("{to} did not answer within {timeout:?}"))),
    }
}

/// IMDSv2: a session token, then the role name, then the role's keys.
async fn instance_metadata(
    endpoint: &str,
    http: &Arc<dyn HttpTransport>,
    clock: &Arc<dyn Clock>,
) -> Result<Fetched, FetchError> {
    let base = endpoint.trim_end_matches('/');
    let from = "the EC2 instance metadata service";
    let build = |method: Method, path: &str, header: (&str, &str)| {
        Request::builder()
            .method(method)
            .uri(format!("{base}{path}"))
            .header(header.0, header.1)
            .body(Bytes::new())
            .map_err(|err| FetchError::lasting(format!("bad instance metadata endpoint {endpoint}: {err}")))
    };
    let request = build(Method::PUT, "/latest/api/token", ("x-aws-ec2-metadata-token-ttl-seconds", "21600"))?;
    let response = send(http, clock, request, METADATA_TIMEOUT, from).await?;
    if !response.status().is_success() {
        return Err(status_error(from, &response));
    }
    let token = String::from_utf8_lossy(response.body()).trim().to_string();
    let path = "/latest/meta-data/iam/security-credentials/";
    let response =
        send(http, clock, build(Method::GET, path, ("x-aws-ec2-metadata-token", &token))?, METADATA_TIMEOUT, from)
            .await?;
    if !response.status().is_success() {
        return Err(status_error(from, &response));
    }
    let listing = String::from_utf8_lossy(response.body());
    let Some(role) = listing.lines().map(str::trim).find(|line| !line.is_empty()).map(str::to_string) else {
        return Err(FetchError::lasting("this EC2 instance has no IAM role (instance profile) attached"));
    };
    let path = format!("{path}{role}");
    let response =
        send(http, clock, build(Method::GET, &path, ("x-aws-ec2-metadata-token", &token))?, METADATA_TIMEOUT, from)
            .await?;
    if !response.status().is_success() {
        return Err(status_error(from, &response));
    }
    json_keys(response.body(), "Token", from)
}

/// Runs a `credential_process` command and reads its JSON.
async fn run_process(command: &str, clock: &Arc<dyn Clock>) -> Result<Fetched, FetchError> {
    let words = split_words(command)
        .map_err(|err| FetchError::lasting(format!("credential_process {command:?} cannot be split: {err}")))?;
    let task = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&words[0]).args(&words[1..]).stdin(std::process::Stdio::null()).output()
    });
    let deadline = clock.now() + PROCESS_TIMEOUT;
    let output = tokio::select! {
        biased;
        joined = task => joined.map_err(|err| FetchError::passing(format!("credential_process did not finish: {err}")))?,
        () = clock.sleep_until(deadline) => {
            return Err(FetchError::passing(format!("credential_process {command:?} ran longer than {PROCESS_TIMEOUT:?}")));
        }
    };
    let output =
        output.map_err(|err| FetchError::lasting(format!("cannot run credential_process {command:?}: {err}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(FetchError::lasting(format!(
            "credential_process {command:?} failed ({}): {}",
            output.status,
            stderr.trim()
        )));
    }
    let from = format!("credential_process {command:?}");
    let value: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|err| FetchError::lasting(format!("{from} did not print JSON: {err}")))?;
    if value.get("Version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Err(FetchError::lasting(format!("{from} printed JSON without \"Version\": 1")));
    }
    json_keys(&output.stdout, "SessionToken", &from).map_err(|err| FetchError::lasting(err.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("arn:aws:iam::1:role/a b+c"), "arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fa%20b%2Bc");
    }

    #[test]
    fn sts_answers_are_read_and_refusals_are_lasting() {
        let ok = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>\
                  <SecretAccessKey>s/+</SecretAccessKey><SessionToken>t</SessionToken>\
                  <Expiration>2030-01-02T03:04:05Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>";
        let response = Response::builder().status(200).body(Bytes::from(ok)).unwrap();
        let fetched = sts_answer(&response, "AssumeRole", "r").unwrap();
        assert_eq!(fetched.credentials, Credentials::new("ASIA1", "s/+").with_session_token("t"));
        assert_eq!(fetched.expires, Some(crate::rfc3339::parse("2030-01-02T03:04:05Z").unwrap()));
        let denied = "<ErrorResponse><Error><Code>AccessDenied</Code><Message>no</Message></Error></ErrorResponse>";
        let response = Response::builder().status(403).body(Bytes::from(denied)).unwrap();
        let err = sts_answer(&response, "AssumeRole", "r").unwrap_err();
        assert!(err.lasting && err.message.contains("AccessDenied"), "{err:?}");
        let response = Response::builder().status(400).body(Bytes::from("<Code>Throttling</Code>")).unwrap();
        assert!(!sts_answer(&response, "AssumeRole", "r").unwrap_err().lasting);
    }

    #[test]
    fn container_json_needs_both_keys() {
        let fetched = json_keys(
            br#"{"AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2030-01-01T00:00:00Z"}"#,
            "Token",
            "x",
        )
        .unwrap();
        assert_eq!(fetched.credentials, Credentials::new("A", "S").with_session_token("T"));
        assert!(json_keys(br#"{"AccessKeyId":"A"}"#, "Token", "x").is_err());
        assert!(json_keys(b"not json", "Token", "x").is_err());
    }
}
