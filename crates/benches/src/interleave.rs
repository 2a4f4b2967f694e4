//! The interleaved pass of the wall-time benches (`happy_path`, `reqwest`):
//! the variants take turns batch by batch, the first variant of each turn
//! rotating, so that a change in the machine's load reaches them all
//! alike; a round gives each variant its median batch, and a ratio one
//! value per round, summarised by its median and spread.

/// The median of sorted values (the mean of the middle two for an even
/// count; `NaN` for none).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Runs `rounds` rounds of `samples` batches of each of `variants`
/// variants, alternating batch by batch; `batch(i)` runs one batch of
/// variant `i` and returns its time per call. Returns, per variant, its
/// median batch of each round.
pub fn per_round_medians(
    variants: usize,
    rounds: usize,
    samples: usize,
    mut batch: impl FnMut(usize) -> f64,
) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::with_capacity(rounds); variants];
    let mut batches = vec![Vec::with_capacity(samples); variants];
    for _ in 0..rounds {
        for sample in 0..samples {
            for k in 0..variants {
                let i = (sample + k) % variants;
                batches[i].push(batch(i));
            }
        }
        for (i, round) in batches.iter_mut().enumerate() {
            round.sort_by(f64::total_cmp);
            times[i].push(median(round));
            round.clear();
        }
    }
    times
}

/// Values summarised: median, 10th and 90th percentiles, extremes.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The 10th percentile (nearest rank).
    pub p10: f64,
    /// The 90th percentile (nearest rank).
    pub p90: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (`NaN` everywhere for none).
    pub fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let last = values.len().saturating_sub(1);
        let at = |q: f64| {
            values
                .get((last as f64 * q).round() as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        Self {
            median: median(&values),
            p10: at(0.1),
            p90: at(0.9),
            min: at(0.0),
            max: at(1.0),
        }
    }

    /// The spread of the per-round ratio `times[numerator] /
    /// times[denominator]` (as [`per_round_medians`] returns them).
    pub fn of_ratio(times: &[Vec<f64>], numerator: usize, denominator: usize) -> Self {
        Self::of(
            times[numerator]
                .iter()
                .zip(&times[denominator])
                .map(|(a, b)| a / b)
                .collect(),
        )
    }
}

/// The per-round times of an interleaved pass, by variant name, and the
/// report both wall-time benches print of it.
pub struct Pass<'a> {
    /// The variants' names, in the order of `times`.
    pub names: &'a [&'a str],
    /// Per variant, its median batch of each round ([`per_round_medians`]).
    pub times: &'a [Vec<f64>],
    /// Batches per variant and round.
    pub samples: usize,
    /// Calls per batch.
    pub batch: usize,
}

impl Pass<'_> {
    /// The position of the variant `name`; a name that is not one of them
    /// is a mistake in the bench, not a zero.
    ///
    /// # Panics
    ///
    /// If `name` is not a variant's.
    pub fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} is not a variant of this pass"))
    }

    /// Rounds in the pass.
    fn rounds(&self) -> usize {
        self.times.first().map_or(0, Vec::len)
    }

    /// Prints how the pass ran (its batches of `calls`) and each variant's
    /// median, min and max over the rounds, in `unit`.
    pub fn print_variants(&self, calls: &str, unit: &str) {
        println!(
            "\ninterleaved: {} rounds x {} batches of {} {calls} per variant, \
             alternating batch by batch; per round, each variant's median batch",
            self.rounds(),
            self.samples,
            self.batch
        );
        let width = self
            .names
            .iter()
            .map(|n| n.len())
            .max()
            .unwrap_or(0)
            .max(unit.len() + 10);
        println!(
            "  {:<width$} {:>8} {:>8} {:>8}",
            format!("variant ({unit})"),
            "median",
            "min",
            "max"
        );
        for (name, times) in self.names.iter().zip(self.times) {
            let t = Spread::of(times.clone());
            println!(
                "  {name:<width$} {:>8.2} {:>8.2} {:>8.2}",
                t.median, t.min, t.max
            );
        }
    }

    /// Prints the heading of the ratios that follow.
    pub fn print_ratios_heading(&self) {
        println!(
            "\nratios, per round (median [p10 .. p90] (min .. max) over {} rounds):",
            self.rounds()
        );
    }

    /// Prints the per-round ratio `numerator / denominator`: median
    /// [p10 .. p90] (min .. max), its goal if any, and what it means.
    pub fn print_ratio(
        &self,
        numerator: &str,
        denominator: &str,
        goal: Option<f64>,
        meaning: &str,
    ) {
        let r = Spread::of_ratio(self.times, self.index(numerator), self.index(denominator));
        let goal = goal.map_or_else(|| "no goal".to_owned(), |g| format!("goal <= {g:.2}"));
        println!(
            "  {numerator} / {denominator} = {:.3} [{:.3} .. {:.3}] ({:.3} .. {:.3})  {goal} ({meaning})",
            r.median, r.p10, r.p90, r.min, r.max
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn every_variant_gets_every_batch_and_a_median_per_round() {
        let mut calls = [0usize; 3];
        let times = per_round_medians(3, 4, 5, |i| {
            calls[i] += 1;
            (i + 1) as f64
        });
        assert_eq!(calls, [20, 20, 20]);
        assert_eq!(times, vec![vec![1.0; 4], vec![2.0; 4], vec![3.0; 4]]);
        let ratio = Spread::of_ratio(&times, 2, 0);
        assert_eq!((ratio.median, ratio.min, ratio.max), (3.0, 3.0, 3.0));
    }

    #[test]
    #[should_panic(expected = "nope is not a variant")]
    fn an_unknown_variant_name_is_refused() {
        let times = vec![vec![1.0], vec![2.0]];
        let pass = Pass {
            names: &["a", "b"],
            times: &times,
            samples: 1,
            batch: 1,
        };
        assert_eq!((pass.index("a"), pass.index("b")), (0, 1));
        pass.index("nope");
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let spread = Spread::of((1..=11).rev().map(f64::from).collect());
        assert_eq!(
            (
                spread.median,
                spread.p10,
                spread.p90,
                spread.min,
                spread.max
            ),
            (6.0, 2.0, 10.0, 1.0, 11.0)
        );
    }
}
