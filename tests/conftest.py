"""Session-wide test plugins: the real servers integration tests run against."""

pytest_plugins = ["tests.infra.pytest_kafka", "tests.infra.pytest_kube"]
