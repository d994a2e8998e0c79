//! [`Client::get`] and [`Client::get_many`]: private key-value lookups (`docs/spec/kv.md` §6).
//!
//! Each key becomes its `d` candidate pages; all `d·K` page fetches go out as one query per
//! party (split only where a party's key limit forces it, and then by whole lookups), so a party
//! sees the same shape of query whether the keys exist or not. The key and its tag stay here.

use pirq_shared::kv::{Encodings, KvParams, ValueKind};

use crate::{Client, ClientError};

/// Values looked up together, with the epoch they are from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Values {
    pub epoch: u64,
    /// The database digest (SPEC §2.1) both parties answered from.
    pub digest: Option<crate::Digest>,
    /// What the table stores: a set's present keys have the empty value.
    pub kind: ValueKind,
    /// How the table's keys and values are written (KV §2: recorded by the builder, so a
    /// caller can show a value as it was given: text, JSON, bytes); not recorded means hex.
    pub encodings: Encodings,
    /// `values[i]` is the value of `keys[i]`, `None` when the key is absent (for a set,
    /// `Some(vec![])` when it is present).
    pub values: Vec<Option<Vec<u8>>>,
    /// What was checked about the candidate pages against the publisher's signatures.
    pub verification: crate::Verification,
}

impl Client {
    /// The layout both parties advertise, checked against their geometry, with the epoch to pin
    /// (`epoch`, or the newest both serve) and the key limit per query.
    pub async fn kv_layout(
        &self,
        epoch: Option<u64>,
    ) -> Result<(KvParams, u64, usize), ClientError> {
        let agreement = self.agreement(&self.deadline()).await?;
        let params = self.params_of(&agreement.info)?;
        Ok((params, epoch.unwrap_or(agreement.epoch), agreement.max_keys))
    }

    fn params_of(&self, info: &pirq_shared::wire::Info) -> Result<KvParams, ClientError> {
        let kv = info.kv.as_ref().ok_or_else(|| {
            ClientError::NotKv(format!(
                "{} serves a page database (no \"kv\" in /v1/info)",
                self.a.base()
            ))
        })?;
        // Slots sit in the usable bytes, before a signed database's tails (SPEC §2.5).
        let tail = info.signing.as_ref().map_or(0, |s| s.tail_len);
        kv.params_with_tail(info.page_size, tail, info.num_pages)
            .map_err(|detail| self.a.protocol(detail))
    }

    /// Looks `key` up without telling either party which: its value, or `None` when absent.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        let values = self.get_many(&[key]).await?;
        Ok(values.values.into_iter().next().flatten())
    }

    /// Looks `keys` up without telling either party which (KV §6), in one query per party
    /// (more only where the parties' key limit says so), at the newest epoch both serve.
    pub async fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Values, ClientError> {
        self.get_many_at(keys, None).await
    }

    /// [`Client::get_many`] pinned to `epoch` (any epoch in both parties' windows) when given.
    pub async fn get_many_at<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        epoch: Option<u64>,
    ) -> Result<Values, ClientError> {
        let d = self.deadline();
        let agreement = self.agreement(&d).await?;
        let params = self.params_of(&agreement.info)?;
        let d_choices = params.choices();
        let mut tags = Vec::with_capacity(keys.len());
        let mut pages = Vec::with_capacity(keys.len() * d_choices);
        for (index, key) in keys.iter().enumerate() {
            let key = key.as_ref();
            params
                .check_key(key)
                .map_err(|e| ClientError::BadKey { index, reason: e })?;
            let tag = params.tag(key);
            pages.extend_from_slice(&params.candidates(&tag));
            tags.push(tag);
        }
        let fetched = self.fetch_grouped(&pages, d_choices, epoch, &d).await?;
        let mut values = Vec::with_capacity(tags.len());
        for (tag, candidates) in tags.iter().zip(fetched.pages.chunks(d_choices)) {
            let mut value = None;
            for page in candidates {
                // A malformed slot (KV §4) is refused, never read as a value or as absent.
                let found = params.find(page, tag).map_err(|e| ClientError::Protocol {
                    party: format!("{} and {}", self.a.name(), self.b.name()),
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
            epoch: fetched.epoch,
            digest: fetched.digest,
            kind: params.kind(),
            encodings: params.encodings(),
            values,
            verification: fetched.verification,
        })
    }
}
