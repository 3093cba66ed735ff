//! Frame benchmark: see the module docs once written.

fn main() {}
