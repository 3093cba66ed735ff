//! The colour of a report label, one rule for every picture the project draws: the viewer's timeline and its
//! Summary tab, the SVG/PNG charts and the HTML page.
//!
//! A category takes the colour its rules file gives it (`[[category]] color`), else one of a fixed palette chosen
//! by its name (so that it does not change with the order of the categories). `comm.<type>` takes the colour of
//! `communication`; `wait.<type>`, a collective's waiting for the last rank, takes the same colour darkened by
//! [`WAIT_DARKEN`], so that waiting reads as communication that moved no data, and never as another category. The
//! darkening is towards black, not towards a background, so that it is the same colour on a light or dark page.

use crate::figures::categories::{self, CategoryId, Classifier};

/// How much of its colour a collective's waiting part keeps (each channel times this).
pub const WAIT_DARKEN: f64 = 0.55;

/// Colours for categories the rules give none (Tableau 10).
pub const PALETTE: [[u8; 3]; 10] = [
    [0x4e, 0x79, 0xa7],
    [0xf2, 0x8e, 0x2b],
    [0xe1, 0x57, 0x59],
    [0x76, 0xb7, 0xb2],
    [0x59, 0xa1, 0x4f],
    [0xed, 0xc9, 0x48],
    [0xb0, 0x7a, 0xa1],
    [0xff, 0x9d, 0xa7],
    [0x9c, 0x75, 0x5f],
    [0xba, 0xb0, 0xac],
];

/// The colour of a report label (`gemm`, `comm.all_reduce`, `wait.all_reduce`, a category name).
pub fn label_color(classifier: &Classifier, label: &str) -> [u8; 3] {
    let (category, waiting) = if label.starts_with(categories::WAIT_PREFIX) {
        (categories::COMMUNICATION, true)
    } else if label.starts_with(categories::COMM_PREFIX) {
        (categories::COMMUNICATION, false)
    } else {
        (label, false)
    };
    let id = classifier.categories().iter().position(|c| c == category);
    let base = id.and_then(|i| classifier.color(CategoryId(i as u16))).unwrap_or_else(|| palette(category));
    if waiting { waiting_color(base) } else { base }
}

/// A palette colour chosen by the name.
pub fn palette(name: &str) -> [u8; 3] {
    let hash = name.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    PALETTE[(hash % PALETTE.len() as u32) as usize]
}

/// The colour of the waiting part of a collective drawn in `color`.
pub fn waiting_color(color: [u8; 3]) -> [u8; 3] {
    color.map(|channel| (f64::from(channel) * WAIT_DARKEN).round() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_the_communication_colour_darkened_and_unlike_every_category() {
        let rules = Classifier::builtin();
        let communication = label_color(&rules, categories::COMMUNICATION);
        assert_eq!(label_color(&rules, "comm.all_reduce"), communication);
        let wait = label_color(&rules, "wait.all_reduce");
        assert_eq!(wait, waiting_color(communication));
        assert_eq!(label_color(&rules, "wait.all_gather"), wait, "one waiting colour for every collective type");
        for name in rules.categories() {
            assert_ne!(label_color(&rules, name), wait, "{name} is drawn like waiting");
        }
        assert_eq!(label_color(&rules, "gemm"), [0x4e, 0x79, 0xa7], "the rules file's colour");
    }

    #[test]
    fn a_category_without_a_colour_keeps_its_palette_colour_whatever_the_order() {
        let rules = Classifier::builtin();
        assert_eq!(label_color(&rules, "not_in_the_rules"), palette("not_in_the_rules"));
        assert!(PALETTE.contains(&palette("x")));
    }
}
