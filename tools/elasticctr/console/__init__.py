"""The ElasticCTR console: the platform's scenarios in a browser (docs/console.md).

`server` serves the app (static/) and its JSON API over a `Backend` that
`elasticctr.cli.console` makes from the clients `ectl` uses (the local platform, or a
release on Kubernetes); `traffic` turns serving's histograms into QPS and p99.
"""
