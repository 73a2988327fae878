"""A run's configuration is an ordered list of layers (knob -> (value, source)), laid over the
config lowest first; the derived knobs follow the layers."""

from __future__ import annotations

import pytest

from adapters.training import config
from adapters.training.config import ConfigError, TrainConfig, layers


def test_the_layers_in_order_on_each_device():
    raw = TrainConfig(env="sokoban", lr=2e-4)
    cpu = layers(raw, cuda=False)
    assert [layer.name for layer in cpu] == [
        "knob default",
        "recipe",
        "setting",
        "recipe CPU scale-down",
        "setting CPU values",
        "user",
    ]
    by_name = {layer.name: layer.values for layer in cpu}
    assert by_name["user"]["lr"] == (2e-4, "user")
    assert by_name["recipe"]["lr"][1].startswith("recipe at-grpo: ")
    assert by_name["setting CPU values"]["env_config.height"][0] == 8  # an env option
    gpu = {layer.name: layer.values for layer in layers(raw, cuda=True)}
    assert gpu["recipe CPU scale-down"] == {} and gpu["setting CPU values"] == {}
    # the derived knobs take no declared default: they follow the others after the layers
    assert not set(config.DERIVED) & set(by_name["knob default"])


def test_a_later_layer_wins_and_the_users_mapping_extends_the_one_below():
    c = TrainConfig(env="sokoban", role_sampling={"critic": {"top_p": 0.5}}).resolved(cuda=False)
    # the setting's CPU value for the planner stays beside the user's role
    assert c.generation.role_sampling == {
        "planner": {"max_new_tokens": 64},
        "critic": {"top_p": 0.5},
    }
    assert list(c.generation.role_sampling) == ["planner", "critic"]  # the layer's, then the user's
    assert c.sources["role_sampling"] == "user"
    assert c.sources["max_new_tokens"].startswith("setting sokoban: CPU")  # over the recipe's CPU


def test_a_recipe_or_setting_sets_auto_knobs_only():
    with pytest.raises(ConfigError, match="auto and merged knobs only"):
        config._attributed("recipe x", {"clip_eps": (0.3, "a value the user's would lose to")})
