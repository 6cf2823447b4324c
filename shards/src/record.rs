//! Logical records of the UAL. State is a fold of these (see `state::ShardState::apply`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    KvPut {
        namespace: String,
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// The version this put gives the key.
        version: u64,
        expires_at_ms: Option<u64>,
    },
    KvDelete {
        namespace: String,
        key: String,
    },
}

impl Record {
    /// Type code stored in the record header (for tools that scan without decoding).
    pub fn type_code(&self) -> u16 {
        match self {
            Record::KvPut { .. } => 1,
            Record::KvDelete { .. } => 2,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ser = rmp_serde::Serializer::new(out);
        // Encoding plain owned data into a Vec cannot fail.
        self.serialize(&mut ser).expect("record encodes");
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }
}
