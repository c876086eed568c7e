//! The six programs' hot functions go first in the executable
//! (`tools/hot_functions_first.rs`).
include!("../tools/hot_functions_first.rs");

fn main() {
    link_hot_functions_first("hot-functions.txt");
}
