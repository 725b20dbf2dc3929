//! SigV4 authentication against the configured key pairs, with S3's codes
//! for each way a signature can be wrong.

use super::*;

impl FakeS3 {
    pub(super) fn authenticate(&self, request: &Request<Bytes>) -> Result<(), S3Failure> {
        let authorization =
            Authorization::from_request(request).map_err(|err| S3Failure::from_verify(&err, request))?;
        let Some(verifier) = self.inner.credentials.get(authorization.access_key_id()) else {
            return Err(S3Failure::new(
                403,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
            .with("AWSAccessKeyId", authorization.access_key_id()));
        };
        verifier
            .verify(request, self.inner.clock.wall(), MAX_CLOCK_SKEW)
            .map(|_| ())
            .map_err(|err| S3Failure::from_verify(&err, request))
    }
}
