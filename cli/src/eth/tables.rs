//! The three tables of an Ethereum state and the bytes of their records: what `eth import`
//! writes and `eth serve` reads, in one place so the two cannot drift apart.

use pirq_shared::kv::{Encoding, Encodings, KvLayout, ValueKind};
use sha3::{Digest, Keccak256};

/// Table names, as the parties serve them (`pirq-worker --table NAME=DIR/NAME.pirdb`).
pub const ACCOUNTS: &str = "accounts";
pub const CODE: &str = "code";
pub const STORAGE: &str = "storage";
/// Every table, in the order the import writes them and the update files are named.
pub const ALL: [&str; 3] = [ACCOUNTS, CODE, STORAGE];

/// Bytes of an address, a hash, a storage slot and a storage value.
pub const ADDRESS_LEN: usize = 20;
pub const WORD: usize = 32;
/// A storage record's key: address ‖ slot.
pub const STORAGE_KEY_LEN: usize = ADDRESS_LEN + WORD;
/// An account record's value: balance (32, big-endian) ‖ nonce (8, big-endian) ‖ code hash (32)
/// ‖ storage root (32).
pub const ACCOUNT_LEN: usize = WORD + 8 + WORD + WORD;
/// The largest contract code (EIP-170), the code table's default largest value.
pub const MAX_CODE_SIZE: u32 = 24_576;

/// The key of the `accounts` table's metadata record. 13 bytes, so never an address (every
/// other key of the table is 20 bytes): no account can shadow it, and no read of an address
/// finds it.
pub const META_KEY: &[u8] = b"pirq-eth:meta";

/// keccak256 of no bytes: the code hash of an account without code.
pub const EMPTY_CODE_HASH: [u8; 32] =
    hex_literal("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
/// The root of an empty trie: the storage root of an account without storage.
pub const EMPTY_ROOT: [u8; 32] =
    hex_literal("56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421");

const fn hex_literal(text: &str) -> [u8; 32] {
    let b = text.as_bytes();
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = nibble(b[2 * i]) << 4 | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("not a lowercase hex digit"),
    }
}

pub fn keccak256(bytes: &[u8]) -> [u8; 32] {
    Keccak256::digest(bytes).into()
}

/// The layout of table `name` (its seed given): the page size, choices and value size each
/// table is built with.
pub struct TableSpec {
    pub name: &'static str,
    pub page_size: u32,
    pub layout: KvLayout,
}

/// The three tables' layouts. Accounts and storage: 4 KiB pages, d = 2 (34 and 85 slots a
/// page). Code: a slot holds the largest code, so 32 KiB pages of one slot each; d = 3 places
/// one-slot pages to a load of 0.85 where d = 2 stops near 0.45 (docs/bench/kv.md).
pub fn specs(seeds: [[u8; 32]; 3], max_code_size: u32) -> [TableSpec; 3] {
    let hex = Encodings {
        key: Some(Encoding::Hex),
        value: Some(Encoding::Hex),
    };
    [
        TableSpec {
            name: ACCOUNTS,
            page_size: 4096,
            layout: KvLayout {
                choices: 2,
                kind: ValueKind::Fixed,
                value_size: ACCOUNT_LEN as u32,
                // Any length: addresses are 20 bytes, the metadata key 13.
                key_size: 0,
                seed: seeds[0],
                encodings: hex,
            },
        },
        TableSpec {
            name: CODE,
            page_size: code_page_size(max_code_size),
            layout: KvLayout {
                choices: 3,
                kind: ValueKind::Variable,
                value_size: max_code_size,
                key_size: WORD as u32,
                seed: seeds[1],
                encodings: hex,
            },
        },
        TableSpec {
            name: STORAGE,
            page_size: 4096,
            layout: KvLayout {
                choices: 2,
                kind: ValueKind::Fixed,
                value_size: WORD as u32,
                key_size: STORAGE_KEY_LEN as u32,
                seed: seeds[2],
                encodings: hex,
            },
        },
    ]
}

/// The smallest page (a power of two, at least 4 KiB) with room for one slot of the largest
/// code and a signature tail (SPEC §2.4: 72 bytes).
fn code_page_size(max_code_size: u32) -> u32 {
    (max_code_size + 18 + 72).next_power_of_two().max(4096)
}

/// An account as the `accounts` table stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Account {
    /// Wei, 256-bit big-endian.
    pub balance: [u8; 32],
    pub nonce: u64,
    pub code_hash: [u8; 32],
    pub storage_root: [u8; 32],
}

impl Account {
    pub fn to_bytes(self) -> [u8; ACCOUNT_LEN] {
        let mut out = [0u8; ACCOUNT_LEN];
        out[..32].copy_from_slice(&self.balance);
        out[32..40].copy_from_slice(&self.nonce.to_be_bytes());
        out[40..72].copy_from_slice(&self.code_hash);
        out[72..].copy_from_slice(&self.storage_root);
        out
    }

    /// `None` when `bytes` is not an account record's length.
    pub fn from_bytes(bytes: &[u8]) -> Option<Account> {
        if bytes.len() != ACCOUNT_LEN {
            return None;
        }
        Some(Account {
            balance: bytes[..32].try_into().ok()?,
            nonce: u64::from_be_bytes(bytes[32..40].try_into().ok()?),
            code_hash: bytes[40..72].try_into().ok()?,
            storage_root: bytes[72..].try_into().ok()?,
        })
    }

    pub fn has_code(&self) -> bool {
        self.code_hash != EMPTY_CODE_HASH
    }
}

/// The metadata record (`accounts` table, key [`META_KEY`]): which block the tables hold.
/// Value: version (1 byte, 1) ‖ block number (8, big-endian) ‖ state root (32; zero when the
/// dump had no header line) ‖ zeros up to the account record's 104 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub block: u64,
    pub state_root: [u8; 32],
}

const META_VERSION: u8 = 1;

impl Meta {
    pub fn to_bytes(self) -> [u8; ACCOUNT_LEN] {
        let mut out = [0u8; ACCOUNT_LEN];
        out[0] = META_VERSION;
        out[1..9].copy_from_slice(&self.block.to_be_bytes());
        out[9..41].copy_from_slice(&self.state_root);
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Meta, String> {
        if bytes.len() != ACCOUNT_LEN || bytes[0] != META_VERSION {
            return Err(format!(
                "the metadata record is not version {META_VERSION} of {ACCOUNT_LEN} bytes"
            ));
        }
        Ok(Meta {
            block: u64::from_be_bytes(bytes[1..9].try_into().expect("8 bytes")),
            state_root: bytes[9..41].try_into().expect("32 bytes"),
        })
    }
}

/// A storage record's key.
pub fn storage_key(address: &[u8; ADDRESS_LEN], slot: &[u8; 32]) -> [u8; STORAGE_KEY_LEN] {
    let mut key = [0u8; STORAGE_KEY_LEN];
    key[..ADDRESS_LEN].copy_from_slice(address);
    key[ADDRESS_LEN..].copy_from_slice(slot);
    key
}

/// Hex digits with or without `0x` (either case), as geth prints them, into bytes; an odd
/// number of digits reads as if a `0` led.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    let padded;
    let even = if digits.len() % 2 == 1 {
        padded = format!("0{digits}");
        &padded
    } else {
        digits
    };
    hex::decode(even).map_err(|_| format!("{:?} is not hex", shorten(text)))
}

/// Hex of at most 32 bytes, left-padded with zeros to 32 (geth prints storage values without
/// their leading zero bytes).
pub fn parse_word(text: &str) -> Result<[u8; 32], String> {
    let bytes = parse_hex(text)?;
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    let significant = &bytes[first..];
    if significant.len() > 32 {
        return Err(format!("{:?} is more than 32 bytes", shorten(text)));
    }
    let mut word = [0u8; 32];
    word[32 - significant.len()..].copy_from_slice(significant);
    Ok(word)
}

/// Exactly `N` bytes of hex.
pub fn parse_fixed<const N: usize>(text: &str, what: &str) -> Result<[u8; N], String> {
    let bytes = parse_hex(text)?;
    bytes.as_slice().try_into().map_err(|_| {
        format!(
            "{what} {:?} is {} bytes, not {N}",
            shorten(text),
            bytes.len()
        )
    })
}

/// A decimal number below 2^256 (geth prints balances in decimal) as 32 bytes big-endian.
/// Hand-written (a multiply-by-ten loop) rather than a big-integer crate: this is the one
/// big-number operation the import needs.
pub fn parse_decimal_u256(text: &str) -> Result<[u8; 32], String> {
    if text.is_empty() || text.len() > 78 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{:?} is not a decimal number below 2^256",
            shorten(text)
        ));
    }
    let mut n = [0u8; 32];
    for digit in text.bytes() {
        let mut carry = (digit - b'0') as u32;
        for byte in n.iter_mut().rev() {
            let v = *byte as u32 * 10 + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
        if carry != 0 {
            return Err(format!("{:?} is 2^256 or more", shorten(text)));
        }
    }
    Ok(n)
}

/// A JSON-RPC quantity: `0x` and the hex digits without leading zeros (`0x0` for zero).
pub fn quantity(bytes: &[u8]) -> String {
    let digits = hex::encode(bytes);
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        "0x0".into()
    } else {
        format!("0x{trimmed}")
    }
}

/// JSON-RPC data: `0x` and every byte.
pub fn data(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// The start of a value for an error message (a bad line's field can be megabytes).
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_hashes_are_keccak_of_nothing_and_of_the_empty_trie() {
        assert_eq!(keccak256(b""), EMPTY_CODE_HASH);
        // The empty trie's root is keccak256 of RLP("") = 0x80.
        assert_eq!(keccak256(&[0x80]), EMPTY_ROOT);
    }

    #[test]
    fn decimal_balances_read_as_big_endian_words() {
        let one_eth = parse_decimal_u256("1000000000000000000").unwrap();
        assert_eq!(quantity(&one_eth), "0xde0b6b3a7640000");
        assert_eq!(quantity(&parse_decimal_u256("0").unwrap()), "0x0");
        let max = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        assert_eq!(parse_decimal_u256(max).unwrap(), [0xff; 32]);
        let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        assert!(parse_decimal_u256(over).unwrap_err().contains("2^256"));
        for bad in ["", "-1", "0x10", "1.5", "1e18"] {
            assert!(parse_decimal_u256(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hex_reads_with_or_without_0x_and_words_are_left_padded() {
        assert_eq!(parse_hex("0xABcd").unwrap(), [0xab, 0xcd]);
        assert_eq!(parse_hex("abcd").unwrap(), [0xab, 0xcd]);
        assert_eq!(parse_hex("0x").unwrap(), Vec::<u8>::new());
        assert_eq!(parse_hex("0x1").unwrap(), [1]);
        assert!(parse_hex("0xzz").is_err());
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(parse_word("01").unwrap(), one);
        assert_eq!(parse_word("0x0001").unwrap(), one);
        assert!(parse_word(&"ff".repeat(33)).is_err());
        assert!(parse_fixed::<20>("0x1234", "address")
            .unwrap_err()
            .contains("not 20"));
    }

    #[test]
    fn records_round_trip() {
        let a = Account {
            balance: [7; 32],
            nonce: 0x0102030405060708,
            code_hash: EMPTY_CODE_HASH,
            storage_root: EMPTY_ROOT,
        };
        assert_eq!(Account::from_bytes(&a.to_bytes()), Some(a));
        let m = Meta {
            block: 19_000_000,
            state_root: [9; 32],
        };
        assert_eq!(Meta::from_bytes(&m.to_bytes()), Ok(m));
        assert!(Meta::from_bytes(&a.to_bytes()).is_err());
        assert_eq!(code_page_size(MAX_CODE_SIZE), 32768);
    }
}
