"""Configuration: the main file (node patterns -> fabrics, overrides, policy) and fabric files."""

from healthcheck.core.config.loader import Config, NodeConfig, load_config

__all__ = ["Config", "NodeConfig", "load_config"]
