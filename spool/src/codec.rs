//! The one field encoding of both spools, and the macros that declare a record once.
//!
//! Every field is little-endian and unpadded: integers in their width, `bool` as one byte (0 or
//! 1; any nonzero byte reads as true), `String` as a `u32` byte length and UTF-8 bytes (invalid
//! UTF-8 replaced on reading), `Option<T>` as a byte 0 or 1 followed by the value when 1, `Vec<T>`
//! as a `u32` count and the items, an array or a tuple as its items in order, and a
//! [`FixedName<N>`] as its `N` bytes.
//!
//! [`spool_struct!`](crate::spool_struct) declares a record struct and derives [`Field`] from its
//! field list (fields are written in declaration order); [`spool_records!`](crate::spool_records)
//! declares a record enum, each variant with its on-disk tag, and derives `tag`, the field encoder
//! and the field decoder from the same list. The spools' framing (a tag byte for the injection
//! library's, a kind and length for the NCCL plugin's) is written by hand beside each enum.
//!
//! ```
//! use shardscope_spool::codec::Field;
//! let mut bytes = Vec::new();
//! (7u32, String::from("ab"), Some(1u8)).put(&mut bytes);
//! assert_eq!(bytes, [7, 0, 0, 0, 2, 0, 0, 0, b'a', b'b', 1, 1]);
//! let mut input = &bytes[..];
//! assert_eq!(<(u32, String, Option<u8>)>::get(&mut input), Some((7, "ab".into(), Some(1))));
//! ```

/// A value with a spool encoding.
pub trait Field: Sized {
    /// Appends the encoding to `out`.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes a value from the front of `input` and advances past it; `None` when the input
    /// ends inside the value or the value is malformed.
    fn get(input: &mut &[u8]) -> Option<Self>;
}

macro_rules! little_endian_field {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(input: &mut &[u8]) -> Option<Self> {
                let (head, rest) = input.split_first_chunk()?;
                *input = rest;
                Some(<$ty>::from_le_bytes(*head))
            }
        }
    )*};
}

little_endian_field!(u8, u16, u32, i32, u64, i64);

impl Field for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        u8::get(input).map(|b| b != 0)
    }
}

impl Field for String {
    fn put(&self, out: &mut Vec<u8>) {
        (self.len() as u32).put(out);
        out.extend_from_slice(self.as_bytes());
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        let len = u32::get(input)? as usize;
        if input.len() < len {
            return None;
        }
        let (head, rest) = input.split_at(len);
        *input = rest;
        Some(String::from_utf8_lossy(head).into_owned())
    }
}

impl<T: Field> Field for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Some(value) => {
                out.push(1);
                value.put(out);
            }
            None => out.push(0),
        }
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        match u8::get(input)? {
            0 => Some(None),
            1 => Some(Some(T::get(input)?)),
            _ => None,
        }
    }
}

impl<T: Field> Field for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        (self.len() as u32).put(out);
        for item in self {
            item.put(out);
        }
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        let count = u32::get(input)?;
        // No capacity from the count: a corrupt count must not allocate gigabytes.
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(T::get(input)?);
        }
        Some(items)
    }
}

impl<T: Field, const N: usize> Field for [T; N] {
    fn put(&self, out: &mut Vec<u8>) {
        for item in self {
            item.put(out);
        }
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        let mut items = Vec::with_capacity(N);
        for _ in 0..N {
            items.push(T::get(input)?);
        }
        items.try_into().ok()
    }
}

impl<A: Field, B: Field> Field for (A, B) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        Some((A::get(input)?, B::get(input)?))
    }
}

impl<A: Field, B: Field, C: Field> Field for (A, B, C) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
        self.2.put(out);
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        Some((A::get(input)?, B::get(input)?, C::get(input)?))
    }
}

/// A name stored inline in `N` bytes: the text up to the first NUL, cut to fit. The NCCL plugin
/// encodes its records without allocating, so its names have fixed sizes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedName<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for FixedName<N> {
    fn default() -> Self {
        FixedName([0; N])
    }
}

impl<const N: usize> FixedName<N> {
    /// Copies `text`, cut to `N` bytes.
    pub fn from_text(text: &str) -> Self {
        let mut bytes = [0; N];
        let len = text.len().min(N);
        bytes[..len].copy_from_slice(&text.as_bytes()[..len]);
        FixedName(bytes)
    }

    /// Copies a C string, cut to `N` bytes; a null pointer gives the empty name.
    ///
    /// # Safety
    /// `ptr` is null or points to a NUL-terminated string, readable during the call.
    pub unsafe fn from_c_str(ptr: *const std::ffi::c_char) -> Self {
        let mut bytes = [0; N];
        if !ptr.is_null() {
            for (i, slot) in bytes.iter_mut().enumerate() {
                // SAFETY: the string is readable up to and including its NUL, and we stop there.
                let b = unsafe { *ptr.add(i) } as u8;
                if b == 0 {
                    break;
                }
                *slot = b;
            }
        }
        FixedName(bytes)
    }

    /// The stored text (invalid UTF-8 replaced).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(N);
        String::from_utf8_lossy(&self.0[..end])
    }
}

impl<const N: usize> std::fmt::Debug for FixedName<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl<const N: usize> Field for FixedName<N> {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
    fn get(input: &mut &[u8]) -> Option<Self> {
        let (head, rest) = input.split_first_chunk::<N>()?;
        *input = rest;
        Some(FixedName(*head))
    }
}

/// Declares a record struct whose fields are written in declaration order, and its [`Field`]
/// implementation from that one list.
#[macro_export]
macro_rules! spool_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty ),*
        }

        impl $crate::codec::Field for $name {
            fn put(&self, out: &mut Vec<u8>) {
                $( $crate::codec::Field::put(&self.$field, out); )*
            }
            fn get(input: &mut &[u8]) -> Option<Self> {
                // Struct expressions evaluate their fields in the order written: the file's order.
                Some($name { $( $field: <$ty as $crate::codec::Field>::get(input)? ),* })
            }
        }
    };
}

/// Declares a record enum, each variant with its on-disk tag (`Variant(Struct) = 3` or
/// `Variant { field: Type, … } = 4`), and derives from that one list:
///
/// - `tag(&self)`: the variant's tag;
/// - `encode_fields(&self, out)`: the variant's fields, in order, without the tag;
/// - `decode_fields(tag, input) -> Option<Option<Self>>`: `Some(None)` for a tag this list does
///   not have, `None` when the input ends inside the fields.
///
/// Tags are part of the file format: append new ones, never renumber.
#[macro_export]
macro_rules! spool_records {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $tag_ty:ty {
            $( $(#[$variant_meta:meta])* $variant:ident $body:tt = $tag:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $( $(#[$variant_meta])* $variant $body ),*
        }

        impl $name {
            /// This record kind's tag on disk.
            pub fn tag(&self) -> $tag_ty {
                match self {
                    $( $name::$variant { .. } => $tag, )*
                }
            }

            /// Appends this record's fields (not its tag) to `out`.
            fn encode_fields(&self, out: &mut Vec<u8>) {
                $( $crate::spool_variant!(@put self, out, $name, $variant $body); )*
            }

            /// Decodes the fields of a record of kind `tag` from the front of `input`.
            fn decode_fields(tag: $tag_ty, input: &mut &[u8]) -> Option<Option<Self>> {
                Some(Some(match tag {
                    $( $tag => $crate::spool_variant!(@get input, $name, $variant $body), )*
                    _ => return Some(None),
                }))
            }
        }
    };
}

/// One variant's encoder or decoder, for [`spool_records!`](crate::spool_records).
#[doc(hidden)]
#[macro_export]
macro_rules! spool_variant {
    (@put $self:ident, $out:ident, $name:ident, $variant:ident ($ty:ty)) => {
        if let $name::$variant(value) = $self {
            $crate::codec::Field::put(value, $out);
            return;
        }
    };
    (@put $self:ident, $out:ident, $name:ident, $variant:ident
        { $( $(#[$field_meta:meta])* $field:ident : $ty:ty ),* $(,)? }) => {
        if let $name::$variant { $( $field ),* } = $self {
            $( $crate::codec::Field::put($field, $out); )*
            return;
        }
    };
    (@get $input:ident, $name:ident, $variant:ident ($ty:ty)) => {
        $name::$variant(<$ty as $crate::codec::Field>::get($input)?)
    };
    (@get $input:ident, $name:ident, $variant:ident
        { $( $(#[$field_meta:meta])* $field:ident : $ty:ty ),* $(,)? }) => {
        $name::$variant { $( $field: <$ty as $crate::codec::Field>::get($input)? ),* }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_options_and_short_inputs_do_not_decode() {
        assert_eq!(Option::<u32>::get(&mut &[2u8, 0, 0, 0, 0][..]), None);
        assert_eq!(String::get(&mut &[5u8, 0, 0, 0, b'a'][..]), None);
        assert_eq!(<[i32; 3]>::get(&mut &[0u8; 11][..]), None);
        let mut input = &[1u8, 0, 2, 0, 0, 0, 9][..];
        assert_eq!(<(u16, u32)>::get(&mut input), Some((1, 2)));
        assert_eq!(input, [9]);
    }

    #[test]
    fn fixed_names_cut_long_text() {
        let long = "x".repeat(40);
        assert_eq!(FixedName::<24>::from_text(&long).as_str().len(), 24);
        let c = std::ffi::CString::new("ncclFloat8e4m3").unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { FixedName::<24>::from_c_str(c.as_ptr()) }.as_str(), "ncclFloat8e4m3");
        // SAFETY: null is allowed.
        assert_eq!(unsafe { FixedName::<24>::from_c_str(std::ptr::null()) }.as_str(), "");
    }
}
