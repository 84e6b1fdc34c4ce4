"""``agentwarm bench``'s policy options reach the bench's policy, validated."""

from __future__ import annotations

import pytest

from agentwarm.bench import BenchConfig
from agentwarm.cli.bench import _config
from agentwarm.errors import ConfigError


def test_spend_top_n_and_min_p_reach_the_policy() -> None:
    config = _config(BenchConfig(), spend="top_n", top_n=3, min_p=0.1)
    assert (config.policy.spend, config.policy.top_n, config.policy.min_p) == ("top_n", 3, 0.1)
    assert _config(BenchConfig()).policy.spend == "value"  # the default


def test_an_unknown_spend_names_the_option_and_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"^--spend: Input should be 'value' or 'top_n'$"):
        _config(BenchConfig(), spend="bogus")
