//! The metrics catalog (`shared/src/metrics.rs`, `docs/metrics.md`) against what the running
//! processes export: after a few real queries through two parties, every catalog metric that
//! the workers' backend emits (CPU here; CUDA with `PIRQ_E2E_CUDA=1` on the GPU machine) is on
//! the `/metrics` endpoint of the process the catalog names, with
//! its help text, its type and (histograms) real buckets; and every `pirq_*` family exported is
//! in the catalog. The Grafana dashboard is checked against the same catalog by
//! scripts/check-ops.sh, so a metric cannot drift between code, docs and dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pirq_client::{Client, Encoding, Options, Wait};
use pirq_e2e::{free_port, metrics, Party, PartyOptions, TestDb};
use pirq_shared::metrics::{self as m, Emitter, Kind, Phase, Presence, CATALOG};
use rand::Rng;

const PAGES: u64 = 2000;
const PAGE_SIZE: u32 = 512;

/// One scrape: family name → (`# TYPE` kind, `# HELP` text, sample lines).
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    help: BTreeMap<String, String>,
    samples: Vec<String>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                s.types.insert(name.into(), kind.into());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP line");
                s.help.insert(name.into(), help.into());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                s.samples.push(line.to_string());
            }
        }
        s
    }

    /// Sample lines of the series `name` (exactly that name, any labels).
    fn series(&self, name: &str) -> Vec<&str> {
        self.samples
            .iter()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .map(String::as_str)
            .collect()
    }

    /// Why `metric` is not properly exported here, or `None` when it is.
    fn problem(&self, metric: &m::Metric) -> Option<String> {
        let name = metric.name;
        let series = match metric.kind {
            Kind::Histogram => format!("{name}_bucket"),
            _ => name.to_string(),
        };
        if self.series(&series).is_empty() {
            return Some(format!("{name}: no {series} samples"));
        }
        if self.help.get(name).map(String::as_str) != Some(metric.help) {
            return Some(format!("{name}: no or wrong # HELP"));
        }
        let want = metric.kind.as_str();
        if self.types.get(name).map(String::as_str) != Some(want) {
            return Some(format!(
                "{name}: # TYPE {:?}, the catalog says {want}",
                self.types.get(name)
            ));
        }
        None
    }

    /// Every `pirq_*` family with samples here.
    fn families(&self) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter_map(|l| {
                let name = l.split(['{', ' ']).next()?;
                name.starts_with("pirq_").then(|| {
                    let base = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .filter(|b| m::get(b).is_some_and(|x| x.kind == Kind::Histogram))
                        .unwrap_or(name);
                    base.to_string()
                })
            })
            .collect()
    }
}

/// The `/metrics` page of the process at `base`, parsed.
async fn scrape(http: &reqwest::Client, base: &str) -> Scrape {
    Scrape::parse(&metrics::scrape(http, base).await)
}

/// Whether the workers run the CUDA backend: `PIRQ_E2E_CUDA=1`, set on the GPU machine where
/// `pirq-worker` is a wrapper forcing `--backend cuda` (see scripts/gpu-e2e.sh).
fn cuda() -> bool {
    std::env::var_os("PIRQ_E2E_CUDA").is_some_and(|v| v == "1")
}

fn expected(emitter: Emitter) -> impl Iterator<Item = &'static m::Metric> {
    // The CUDA-only metrics (VRAM) are expected only from CUDA workers.
    let cuda = cuda();
    CATALOG
        .iter()
        .filter(move |x| x.emitter == emitter && (cuda || x.presence != Presence::Cuda))
}

#[tokio::test]
async fn every_catalog_metric_is_exported_after_traffic() {
    let db = TestDb::create(PAGES, PAGE_SIZE, rand::random()).unwrap();
    let metrics_ports = [free_port(), free_port()];
    let options = |port: u16| PartyOptions {
        worker_args: vec!["--metrics-listen".into(), format!("127.0.0.1:{port}")],
        ..PartyOptions::default()
    };
    let (a, b) = tokio::try_join!(
        Party::start(&db.path, "party-a", options(metrics_ports[0])),
        Party::start(&db.path, "party-b", options(metrics_ports[1])),
    )
    .unwrap();

    let client = Client::with_options(
        &a.url,
        &b.url,
        Options {
            wait: Wait::Events,
            encoding: Encoding::Json,
            timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .unwrap();
    let mut rng = rand::rng();
    for _ in 0..4 {
        let indices: Vec<u64> = (0..3).map(|_| rng.random_range(0..PAGES)).collect();
        let fetched = client.fetch(&indices).await.unwrap();
        for (i, page) in indices.iter().zip(&fetched.pages) {
            assert_eq!(page.as_slice(), db.page(*i), "page {i}");
        }
    }

    // The queue gauges are sampled every couple of seconds; give the gateway a few rounds.
    for (party, port) in [(&a, metrics_ports[0]), (&b, metrics_ports[1])] {
        let deadline = Instant::now() + Duration::from_secs(15);
        let (gateway, worker) = loop {
            let gateway = scrape(&party.http, &party.url).await;
            let worker = scrape(&party.http, &format!("http://127.0.0.1:{port}")).await;
            let missing: Vec<String> = expected(Emitter::Gateway)
                .filter_map(|x| gateway.problem(x))
                .chain(expected(Emitter::Worker).filter_map(|x| worker.problem(x)))
                .collect();
            if missing.is_empty() {
                break (gateway, worker);
            }
            assert!(
                Instant::now() < deadline,
                "{}: catalog metrics not exported:\n{}",
                party.prefix,
                missing.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };

        // Nothing exported outside the catalog, nor by the wrong process.
        for (who, scrape) in [(Emitter::Gateway, &gateway), (Emitter::Worker, &worker)] {
            for family in scrape.families() {
                let entry = m::get(&family)
                    .unwrap_or_else(|| panic!("{family} is exported but not in the catalog"));
                assert_eq!(entry.emitter, who, "{family} exported by the wrong process");
            }
        }

        // Each backend reports its phases; each answered key was counted.
        let phase = worker.series(&format!("{}_count", m::WORKER_PHASE_DURATION));
        let phases: &[Phase] = if cuda() {
            &[Phase::H2d, Phase::Expand, Phase::Scan, Phase::D2h]
        } else {
            &[Phase::Expand, Phase::Scan, Phase::Merge]
        };
        for p in phases {
            assert!(
                phase.iter().any(|l| l.contains(&format!("phase=\"{p}\""))),
                "no {p} phase in {phase:?}"
            );
        }
        // Per table (the party serves `default` only): one line, every key.
        let answered = worker.series(m::WORKER_KEYS_ANSWERED);
        assert_eq!(
            answered,
            [format!(
                "{}{{table=\"default\"}} 12",
                m::WORKER_KEYS_ANSWERED
            )]
        );
        let accepted = gateway.series(m::GATEWAY_KEYS_ACCEPTED);
        assert_eq!(
            accepted,
            [format!(
                "{}{{table=\"default\"}} 12",
                m::GATEWAY_KEYS_ACCEPTED
            )]
        );
    }
}
