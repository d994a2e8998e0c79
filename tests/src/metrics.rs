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

#[cfg(test)]
mod tests {
    use super::value;

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
}
