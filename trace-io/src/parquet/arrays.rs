//! Arrow arrays from Rust values, one helper per column type: what the dataset writer, the analyzer's figures
//! tables and the Python module's tables build their columns with.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, UInt32Array, UInt64Array};

/// A non-null `Int64` column.
pub fn i64s(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

/// A nullable `Int64` column.
pub fn opt_i64s(values: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(Int64Array::from_iter(values))
}

/// A non-null `UInt32` column.
pub fn u32s(values: impl IntoIterator<Item = u32>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(values))
}

/// A nullable `UInt32` column.
pub fn opt_u32s(values: impl IntoIterator<Item = Option<u32>>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter(values))
}

/// A non-null `UInt64` column.
pub fn u64s(values: impl IntoIterator<Item = u64>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(values))
}

/// A nullable `UInt64` column.
pub fn opt_u64s(values: impl IntoIterator<Item = Option<u64>>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter(values))
}

/// A non-null `Utf8` column.
pub fn strs<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// A nullable `Utf8` column.
pub fn opt_strs<S: AsRef<str>>(values: impl IntoIterator<Item = Option<S>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values))
}

/// A non-null `Boolean` column.
pub fn bools(values: impl IntoIterator<Item = bool>) -> ArrayRef {
    Arc::new(BooleanArray::from_iter(values.into_iter().map(Some)))
}

/// A non-null `Float64` column.
pub fn f64s(values: impl IntoIterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(values))
}

/// A nullable `Float64` column.
pub fn opt_f64s(values: impl IntoIterator<Item = Option<f64>>) -> ArrayRef {
    Arc::new(Float64Array::from_iter(values))
}
