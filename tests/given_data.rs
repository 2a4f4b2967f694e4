//! Every case of the given data, replayed through the core API and compared
//! field by field with its `expect` object. The expectations belong to this
//! test; the code under test never reads them.

use retry_budget::schedule;

const FIXTURE: &str = include_str!("fixtures/B62-16-schedules.json");

#[test]
fn every_fixture_case_matches_its_expectation() {
    let fixture = schedule::parse(FIXTURE).expect("the fixture parses");
    assert_eq!(fixture.cases.len(), 15);
    let mut failures = Vec::new();
    for case in &fixture.cases {
        let expect = case.expect.as_ref().expect("every given case has expect");
        // Hide the expectation from the code under test.
        let mut blind = case.clone();
        blind.expect = None;
        let result = schedule::run_case(&blind);
        for mismatch in schedule::mismatches(&result.to_json(), expect) {
            failures.push(format!("{}: {mismatch}", case.id));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn mismatches_are_reported_field_by_field() {
    let fixture = schedule::parse(FIXTURE).unwrap();
    let case = &fixture.cases[0];
    let mut expect = case.expect.clone().unwrap();
    expect["starts_s"][1] = 6.into();
    expect["outcome"] = "budget_exhausted".into();
    let found = schedule::mismatches(&schedule::run_case(case).to_json(), &expect);
    let fields: Vec<_> = found.iter().map(|m| m.field.as_str()).collect();
    assert_eq!(fields, ["outcome", "starts_s[1]"]);
}

#[test]
fn every_line_has_exactly_the_documented_keys() {
    let fixture = schedule::parse(FIXTURE).unwrap();
    for result in schedule::run(&fixture) {
        let line = result.to_json();
        let mut keys: Vec<_> = line.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "attempts_started",
                "events",
                "id",
                "last_status",
                "message",
                "outcome",
                "request_s",
                "starts_s",
                "stopped_at_s",
                "wait_s",
                "waits_s"
            ],
            "{}",
            result.id
        );
        for event in line["events"].as_array().unwrap() {
            assert!(event["at_s"].is_number() && event["kind"].is_string());
        }
    }
}

#[test]
fn invalid_data_names_the_attempt() {
    let fixture = schedule::parse(FIXTURE).unwrap();
    let case = fixture
        .cases
        .iter()
        .find(|c| c.id == "attempt_longer_than_cap")
        .unwrap();
    let line = schedule::run_case(case).to_json();
    let message = line["message"].as_str().unwrap();
    assert!(message.contains("Attempt 1 lasted 4.5 s"), "{message}");
}

#[test]
fn the_visible_status_of_the_spec_example() {
    let fixture = schedule::parse(FIXTURE).unwrap();
    let case = fixture
        .cases
        .iter()
        .find(|c| c.id == "wait_exceeds_budget")
        .unwrap();
    let report = schedule::run_case(case).result.unwrap();
    assert_eq!(
        report.to_string(),
        "Stopped: the retry budget cannot fit the next request.\n\
         Last response: 429. Attempts: 1 / 3. Elapsed: 2 s.\n\
         The service asked to wait 30 s; no retry was sent.\n\
         Category: rate_limit. The service is limiting requests; trying later may work."
    );
}

#[test]
fn bad_documents_are_clear_errors_naming_case_and_field() {
    let mut doc: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    doc["cases"][3]["attempts"][0]["duration_s"] = "two".into();
    let err = schedule::parse(&doc.to_string()).unwrap_err().to_string();
    assert!(
        err.contains(r#"cases[3] ("missing_header").attempts[0].duration_s"#),
        "{err}"
    );

    let mut doc: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    doc["cases"][1]["attempts"][1]
        .as_object_mut()
        .unwrap()
        .remove("status");
    let err = schedule::parse(&doc.to_string()).unwrap_err().to_string();
    assert!(
        err.contains("schedule_b_http_date") && err.contains("status"),
        "{err}"
    );

    let mut doc: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    doc["cases"][0]["leave_at_s"] = (-1).into();
    let err = schedule::parse(&doc.to_string()).unwrap_err().to_string();
    assert!(err.contains("leave_at_s"), "{err}");

    let mut doc: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    doc["policy"]["max_attempts"] = 0.into();
    let err = schedule::parse(&doc.to_string()).unwrap_err().to_string();
    assert!(
        err.starts_with("policy") && err.contains("at least 1"),
        "{err}"
    );

    let err = schedule::parse("{ not json").unwrap_err().to_string();
    assert!(err.starts_with("not valid JSON"), "{err}");
}
