//! The `store-costs` block of `docs/stores.md`: what a renewal and a
//! leader-hour cost on each store at its list prices.
//!
//! The prices are the providers' published list prices for their standard
//! storage class in a US region, per 1,000 requests, with the page each
//! comes from; they are facts to check again before budgeting, not
//! measurements. The request counts come from the library's own defaults
//! (the TTL and the renew interval), so the table moves with them.

use std::time::Duration;

/// One store's list prices, in US dollars per 1,000 requests.
struct Prices {
    store: &'static str,
    write_per_1000: f64,
    read_per_1000: f64,
    source: &'static str,
}

const PRICES: [Prices; 3] = [
    Prices {
        store: "S3 Standard (us-east-1)",
        write_per_1000: 0.005,
        read_per_1000: 0.0004,
        source: "https://aws.amazon.com/s3/pricing/",
    },
    Prices {
        store: "GCS Standard (Class A / Class B)",
        write_per_1000: 0.005,
        read_per_1000: 0.0004,
        source: "https://cloud.google.com/storage/pricing",
    },
    Prices {
        store: "Azure Blob hot tier, LRS (East US)",
        write_per_1000: 0.0065,
        read_per_1000: 0.0005,
        source: "https://azure.microsoft.com/pricing/details/storage/blobs/",
    },
];

/// Followers beside the leader in the group the table prices.
const FOLLOWERS: u32 = 2;

/// The block: one row per store.
pub fn render() -> String {
    let ttl = hoplock::term_timing::DEFAULT_TTL;
    let renew = hoplock::term_timing::default_renew_interval(ttl);
    let per_hour = |every: Duration| Duration::from_secs(3600).as_secs_f64() / every.as_secs_f64();
    // The leader writes once per renew interval; each follower reads about
    // once per renew interval (`Reads::FollowRenewals`, the default).
    let writes = per_hour(renew);
    let reads = per_hour(renew) * f64::from(FOLLOWERS);
    let mut out = format!(
        "At the default TTL of {} s the leader renews every {} s: {writes:.0} conditional writes a \
         leader-hour, and each of {FOLLOWERS} followers reads about as often ({reads:.0} reads in all).\n\n\
         | store | per 1,000 writes | per 1,000 reads | one renewal | a leader-hour, 3 nodes | a year, 3 nodes | prices from |\n\
         |---|---|---|---|---|---|---|\n",
        ttl.as_secs(),
        renew.as_secs()
    );
    for price in &PRICES {
        let renewal = price.write_per_1000 / 1000.0;
        let hour = writes * renewal + reads * price.read_per_1000 / 1000.0;
        out.push_str(&format!(
            "| {} | ${} | ${} | ${renewal:.7} | ${hour:.4} | ${:.2} | <{}> |\n",
            price.store,
            price.write_per_1000,
            price.read_per_1000,
            hour * 24.0 * 365.0,
            price.source
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_store_has_a_row_priced_from_the_defaults() {
        let block = super::render();
        assert_eq!(
            block
                .lines()
                .filter(|line| line.starts_with("| S3") || line.starts_with("| GCS") || line.starts_with("| Azure"))
                .count(),
            3
        );
        // 360 writes and 720 reads an hour at S3's prices.
        assert!(block.contains("| S3 Standard (us-east-1) | $0.005 | $0.0004 | $0.0000050 | $0.0021 |"), "{block}");
    }
}
