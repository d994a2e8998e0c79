//! A process's `/metrics` page (Prometheus text) as the e2e suites read it.

/// `GET {base}/metrics` through `http`: the exposition text.
pub async fn scrape(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {base}/metrics: {e}"))
        .text()
        .await
        .expect("the /metrics text")
}

/// The value of `series` (a metric's name, with its labels if it has any, as exported:
/// `name{label="v"}`) in an exposition text; `None` where the page has no such line.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The sum of every series of the metric `name` in an exposition text, whatever their labels
/// (`name 3`, or `name{table="a"} 1` and `name{table="b"} 2`): a per-table metric read as the
/// process's total, as a scraper that adds up over labels reads it. `None` where the page has no
/// line of it.
pub fn sum(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse().ok()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::{sum, value};

    #[test]
    fn a_series_is_found_by_its_whole_name_and_labels() {
        let text = "# TYPE x_total counter\nx_total 3\nx_total_bytes 9\n\
                    y_total{reason=\"a\"} 1\ny_total{reason=\"ab\"} 2\n";
        assert_eq!(value(text, "x_total"), Some(3.0));
        assert_eq!(value(text, "x_total_bytes"), Some(9.0));
        assert_eq!(value(text, "y_total{reason=\"ab\"}"), Some(2.0));
        assert_eq!(value(text, "y_total"), None);
        assert_eq!(value(text, "z_total"), None);
    }

    #[test]
    fn a_sum_adds_a_metric_up_over_its_labels_and_only_that_metric() {
        let text = "# HELP k_total keys\nk_total{table=\"default\"} 12\n\
                    k_total{table=\"users\",shard=\"0/2\"} 30\nk_total_bytes 9\nk_totals 5\n";
        assert_eq!(sum(text, "k_total"), Some(42.0));
        assert_eq!(sum("x_total 3\n", "x_total"), Some(3.0));
        assert_eq!(sum(text, "k_total_bytes"), Some(9.0));
        assert_eq!(sum(text, "z_total"), None);
    }
}
