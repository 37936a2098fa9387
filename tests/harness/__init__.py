"""The integration tests' harness: settings (env), ports, launches (launch, cache), readers (results), the
float32 error model (parity), the drills' core (drill), the scenarios several steps share (families) and
the one scenario runner (scenario; `python3 -m tests.harness`). tests/README.md has the layout."""
