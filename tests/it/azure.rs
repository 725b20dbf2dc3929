//! The Azure backend against Azurite, the Azure Blob Storage emulator.
//!
//! `cargo xtask test` starts Azurite on 127.0.0.1, creates a container and
//! sets `HOPLOCK_AZURE_CONTAINER`, `AZURITE_BLOB_STORAGE_URL` and
//! `AZURE_STORAGE_USE_EMULATOR=true` (with `HOPLOCK_REQUIRE_S3=1`, so that a
//! test that cannot reach it fails instead of skipping). The story itself
//! is in `stores.rs`.

use std::time::Duration;

use hoplock::azure::{AzureBackend, AzureConfig};
use hoplock::backend::{BackendError, ObjectBackend};
use hoplock::store::Store;

use crate::stores::{self, unique_key};

/// The emulator's settings, or `None` (with a note) when the tests skip.
fn emulator() -> Option<AzureConfig> {
    let Ok(container) = std::env::var("HOPLOCK_AZURE_CONTAINER") else {
        assert!(
            std::env::var("HOPLOCK_REQUIRE_S3").as_deref() != Ok("1"),
            "HOPLOCK_REQUIRE_S3=1 but HOPLOCK_AZURE_CONTAINER is not set"
        );
        eprintln!("skipped: no Azure emulator (run `cargo xtask test`)");
        return None;
    };
    let mut config = AzureConfig::new(container, unique_key("lease"));
    config.request_timeout = Duration::from_secs(10);
    config.operation_deadline = Duration::from_secs(20);
    Some(config)
}

the_shared_story!(emulator().map(store));

fn store(config: AzureConfig) -> Store {
    Store::Azure(AzureBackend::new(config).expect("valid configuration"))
}

#[tokio::test]
async fn passes_both_conformance_suites() {
    let Some(config) = emulator() else { return };
    stores::conformance_suites_pass(store(config)).await;
}

#[tokio::test]
async fn a_missing_container_is_a_configuration_error_not_a_missing_lease() {
    let Some(mut config) = emulator() else { return };
    config.container = "hoplock-no-such-container".into();
    let backend = AzureBackend::new(config).unwrap();
    for error in
        [backend.read_object().await.unwrap_err(), backend.write_object(None, b"x".to_vec()).await.unwrap_err()]
    {
        assert!(matches!(&error, BackendError::Config(m) if m.contains("does not exist")), "{error}");
    }
}

#[tokio::test]
async fn a_conditional_delete_at_a_replaced_version_is_refused() {
    let Some(config) = emulator() else { return };
    let backend = AzureBackend::new(config).unwrap();
    let first = backend.write_object(None, b"one".to_vec()).await.unwrap();
    let second = backend.write_object(Some(&first), b"two".to_vec()).await.unwrap();
    assert_eq!(backend.delete_object(&first).await, Err(BackendError::LeaseHeld));
    assert_eq!(backend.delete_object(&second).await, Ok(()));
}

#[tokio::test]
async fn a_wrong_account_key_is_a_configuration_error_that_says_so() {
    let Some(config) = emulator() else { return };
    // The emulator's account with another (valid base64) key.
    let key = "d3JvbmcgZGV2ZWxvcG1lbnQga2V5IGZvciBhenVyaXRlIGluIGhvcGxvY2sgdGVzdHM=";
    let credentials = std::sync::Arc::new(object_store::StaticCredentialProvider::new(
        object_store::azure::AzureCredential::AccessKey(object_store::azure::AzureAccessKey::try_new(key).unwrap()),
    ));
    let endpoint = std::env::var("AZURITE_BLOB_STORAGE_URL").unwrap();
    let backend = AzureBackend::with_parts(
        config,
        "devstoreaccount1".into(),
        format!("{endpoint}/devstoreaccount1"),
        credentials,
        std::sync::Arc::new(hoplock::transport::ReqwestTransport::new(&Default::default()).unwrap()),
        std::sync::Arc::new(hoplock::clock::SystemClock::new()),
        std::sync::Arc::new(hoplock::entropy::OsEntropy),
    );
    let error = backend.read_object().await.unwrap_err();
    assert!(matches!(&error, BackendError::Config(m) if m.contains("check the account key")), "{error}");
}
