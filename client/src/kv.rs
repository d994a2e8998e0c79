//! [`Client::get`]: private key-value lookups (`docs/spec/kv.md` §6).
//!
//! Each key becomes its `d` candidate pages; all `d·K` page fetches go out as one query per
//! party (split only where a party's key limit forces it, and then by whole lookups), so a party
//! sees the same shape of query whether the keys exist or not. The key and its tag stay here.

use pirq_shared::kv::{KvParams, ValueKind};

use crate::{Client, ClientError};

/// Values looked up together, with the epoch they are from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Values {
    pub epoch: u64,
    /// What the table stores: a set's present keys have the empty value.
    pub kind: ValueKind,
    /// `values[i]` is the value of `keys[i]`, `None` when the key is absent (for a set,
    /// `Some(vec![])` when it is present).
    pub values: Vec<Option<Vec<u8>>>,
}

impl Client {
    /// The layout both parties advertise, checked against their geometry, with the epoch to pin
    /// (`epoch`, or the newest both serve) and the key limit per query.
    pub async fn kv_layout(
        &self,
        epoch: Option<u64>,
    ) -> Result<(KvParams, u64, usize), ClientError> {
        let (info, epoch, max_keys) = self.agree_at(epoch).await?;
        let kv = info.kv.as_ref().ok_or_else(|| {
            ClientError::NotKv(format!(
                "{} serves a page database (no \"kv\" in /v1/info)",
                self.a.base()
            ))
        })?;
        let params = kv
            .params(info.page_size, info.num_pages)
            .map_err(|detail| self.a.protocol(detail))?;
        Ok((params, epoch, max_keys))
    }

    /// Looks up `keys` without telling either party which (KV §6), at the newest epoch both
    /// parties serve.
    pub async fn get(&self, keys: &[Vec<u8>]) -> Result<Values, ClientError> {
        self.get_at(keys, None).await
    }

    /// [`Client::get`] pinned to `epoch` (any epoch in both parties' windows) when given.
    pub async fn get_at(
        &self,
        keys: &[Vec<u8>],
        epoch: Option<u64>,
    ) -> Result<Values, ClientError> {
        let (params, epoch, max_keys) = self.kv_layout(epoch).await?;
        let d = params.choices();
        let mut tags = Vec::with_capacity(keys.len());
        let mut pages = Vec::with_capacity(keys.len() * d);
        for (index, key) in keys.iter().enumerate() {
            params
                .check_key(key)
                .map_err(|e| ClientError::BadKey { index, reason: e })?;
            let tag = params.tag(key);
            pages.extend_from_slice(&params.candidates(&tag));
            tags.push(tag);
        }
        let lookups_per_query = max_keys / d;
        if lookups_per_query == 0 {
            return Err(ClientError::Mismatch(format!(
                "the parties take {max_keys} keys per query, one lookup needs {d}"
            )));
        }
        let chunks = pages
            .chunks(lookups_per_query * d)
            .map(|chunk| self.fetch_chunk(chunk, domain_bits(&params), epoch));
        let fetched: Vec<Vec<u8>> = futures::future::try_join_all(chunks)
            .await?
            .into_iter()
            .flatten()
            .collect();
        let mut values = Vec::with_capacity(tags.len());
        for (tag, candidates) in tags.iter().zip(fetched.chunks(d)) {
            let mut value = None;
            for page in candidates {
                // A malformed slot (KV §4) is refused, never read as a value or as absent.
                let found = params.find(page, tag).map_err(|e| ClientError::Protocol {
                    party: format!("{} and {}", self.a.base(), self.b.base()),
                    detail: format!("their answers combine into a malformed kv page: {e}"),
                })?;
                if let Some(v) = found {
                    value = Some(v.to_vec());
                    break;
                }
            }
            values.push(value);
        }
        Ok(Values {
            epoch,
            kind: params.kind(),
            values,
        })
    }
}

fn domain_bits(params: &KvParams) -> u8 {
    pirq_shared::db::domain_bits(params.num_pages)
}
