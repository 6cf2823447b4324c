//! Arbitrary bytes into the decoder give a frame, "need more" or an error: never a panic.

use flo_protocol::{
    ErrorValue, FRAME_BYTES_MAX, FrameError, MESSAGE_DEPTH_MAX, Op, Reply, Request, Response,
    decode_frame, decode_payload, encode_frame,
};
use proptest::prelude::*;

fn put(id: u64, key: &str) -> Request {
    Request {
        id,
        op: Op::KvPut {
            namespace: "default".into(),
            key: key.into(),
            value: b"v".to_vec(),
            ttl_ms: None,
            if_version: Some(3),
            if_exists: false,
        },
    }
}

#[test]
fn request_round_trips_through_a_frame() {
    let mut buf = Vec::new();
    encode_frame(&put(7, "a"), &mut buf).unwrap();
    encode_frame(&put(8, "b"), &mut buf).unwrap();
    let (first, used) = decode_frame::<Request>(&buf).unwrap().unwrap();
    assert_eq!(first, put(7, "a"));
    let (second, used2) = decode_frame::<Request>(&buf[used..]).unwrap().unwrap();
    assert_eq!(second, put(8, "b"));
    assert_eq!(used + used2, buf.len());
}

#[test]
fn error_response_round_trips() {
    let resp = Response {
        id: 3,
        result: Err(ErrorValue::not_found("no such key")),
    };
    let mut buf = Vec::new();
    encode_frame(&resp, &mut buf).unwrap();
    let (back, _) = decode_frame::<Response>(&buf).unwrap().unwrap();
    assert_eq!(back, resp);
    let ok = Response {
        id: 4,
        result: Ok(Reply::KvDeleted { deleted: true }),
    };
    buf.clear();
    encode_frame(&ok, &mut buf).unwrap();
    assert_eq!(decode_frame::<Response>(&buf).unwrap().unwrap().0, ok);
}

#[test]
fn incomplete_frame_asks_for_more() {
    let mut buf = Vec::new();
    encode_frame(&put(1, "k"), &mut buf).unwrap();
    for cut in 0..buf.len() {
        assert_eq!(
            decode_frame::<Request>(&buf[..cut]).unwrap(),
            None,
            "cut at {cut}"
        );
    }
}

#[test]
fn oversize_frame_is_refused_before_reading_it() {
    let len = (FRAME_BYTES_MAX as u32 + 1).to_be_bytes();
    let err = decode_frame::<Request>(&len).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { .. }), "{err:?}");
}

#[test]
fn garbage_payload_is_malformed() {
    let mut buf = 5u32.to_be_bytes().to_vec();
    buf.extend_from_slice(&[0xc1, 0xff, 0x00, 0x13, 0x37]);
    assert!(matches!(
        decode_frame::<Request>(&buf),
        Err(FrameError::Malformed(_))
    ));
}

/// Found by fuzzing (fuzz/regressions/frame): thousands of nested maps as the value of an
/// unknown field overflowed a 2 MiB stack in a debug build; past `MESSAGE_DEPTH_MAX` levels a
/// payload is malformed.
#[test]
fn deeply_nested_payloads_are_malformed_not_recursed_into() {
    let hello = |extra: &[u8]| {
        let mut payload = b"\x82\xa2id\x01\xa2op\x81\xa5hello\x83\xb0protocol_version\x01\
            \xa6client\xa1x\xa5extra"
            .to_vec();
        payload.extend_from_slice(extra);
        payload
    };
    let nested = |levels: usize| {
        let mut v = b"\x81\xa1k".repeat(levels);
        v.push(0xc0);
        v
    };
    let shallow = decode_payload::<Request>(&hello(&nested(MESSAGE_DEPTH_MAX - 5))).unwrap();
    assert!(matches!(shallow.op, Op::Hello { .. }));
    for levels in [MESSAGE_DEPTH_MAX, 100_000] {
        let err = decode_payload::<Request>(&hello(&nested(levels))).unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_frame::<Request>(&bytes);
        let _ = decode_frame::<Response>(&bytes);
    }

    #[test]
    fn arbitrary_payload_behind_a_valid_header_never_panics(
        payload in proptest::collection::vec(any::<u8>(), 0..512)
    ) {
        let mut buf = (payload.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&payload);
        match decode_frame::<Request>(&buf) {
            Ok(Some((_, used))) => prop_assert_eq!(used, buf.len()),
            Ok(None) => prop_assert!(false, "complete frame reported incomplete"),
            Err(_) => {}
        }
    }

    #[test]
    fn mutated_valid_frames_never_panic(idx in 0usize..64, byte in any::<u8>(), key in "[a-z]{0,20}") {
        let mut buf = Vec::new();
        encode_frame(&put(9, &key), &mut buf).unwrap();
        let i = idx % buf.len();
        buf[i] = byte;
        let _ = decode_frame::<Request>(&buf);
    }
}

/// Requests of clients that predate the optional fields (blocking reads, put conditions,
/// run ids, history pages) still decode, with the fields at their defaults.
#[test]
fn requests_without_the_newer_optional_fields_still_decode() {
    use serde::Serialize;

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum OldOp {
        KvGet {
            namespace: String,
            key: String,
        },
        KvPut {
            namespace: String,
            key: String,
            #[serde(with = "serde_bytes")]
            value: Vec<u8>,
            ttl_ms: Option<u64>,
            if_version: Option<u64>,
        },
        WorkflowHistory {
            namespace: String,
            run_id: String,
        },
    }
    #[derive(Serialize)]
    struct OldRequest {
        id: u64,
        op: OldOp,
    }
    let old = [
        OldOp::KvGet {
            namespace: "ns".into(),
            key: "k".into(),
        },
        OldOp::KvPut {
            namespace: "ns".into(),
            key: "k".into(),
            value: b"v".to_vec(),
            ttl_ms: None,
            if_version: Some(0),
        },
        OldOp::WorkflowHistory {
            namespace: "ns".into(),
            run_id: "wfrun-1".into(),
        },
    ];
    let expected = [
        Op::KvGet {
            namespace: "ns".into(),
            key: "k".into(),
            wait_ms: None,
            after_version: None,
            newer_than_current: false,
        },
        Op::KvPut {
            namespace: "ns".into(),
            key: "k".into(),
            value: b"v".to_vec(),
            ttl_ms: None,
            if_version: Some(0),
            if_exists: false,
        },
        Op::WorkflowHistory {
            namespace: "ns".into(),
            run_id: "wfrun-1".into(),
            limit: None,
            after: None,
        },
    ];
    for (id, (op, want)) in old.into_iter().zip(expected).enumerate() {
        let mut buf = Vec::new();
        encode_frame(&OldRequest { id: id as u64, op }, &mut buf).unwrap();
        let (got, _) = decode_frame::<Request>(&buf).unwrap().unwrap();
        assert_eq!(got.op, want);
    }
}
