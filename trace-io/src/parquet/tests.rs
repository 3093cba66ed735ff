//! Round trips of small traces through a dataset, and refusals of damaged ones.
