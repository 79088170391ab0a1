//! The HTTP heads waitmeter reads from the network: requests to its endpoint,
//! responses of the application endpoints it polls, chunked bodies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::http;

fuzz_target!(|data: &[u8]| {
    // the head as it arrives, in two pieces, the way the endpoint scans it
    let mut scanner = http::HeadScanner::default();
    let cut = data.len() / 2;
    let end = scanner.feed(&data[..cut]).or_else(|| scanner.feed(data));
    assert_eq!(end, http::head_end(data));
    let head = &data[..end.unwrap_or(data.len())];
    if let Ok(req) = http::parse_request(head) {
        assert!(req.headers.len() <= http::MAX_HEADERS);
        for name in ["Accept", "Accept-Encoding"] {
            if let Some(v) = req.header(name) {
                let q = http::quality(v, "gzip", Some("*"));
                assert!(q.is_none_or(|q| (0.0..=1.0).contains(&q)));
            }
        }
    }
    let _ = http::parse_response(head);
    if let Some(body) = http::dechunk(data, 1 << 20) {
        assert!(body.len() <= data.len());
    }
});
