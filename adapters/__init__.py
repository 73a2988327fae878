"""Adapters: LLM policies, rollouts, evaluation and RL training for the settings of :mod:`envs`.

Layers, lowest first; each imports only from those below it (``adapters/README.md`` draws them
and follows one training step through them):

* :mod:`adapters.policies` - the policy interface and its backends, model loading;
* :mod:`adapters.rollout` - the rollout engine, keep rules, env pools, episode specs;
* :mod:`adapters.evaluation` - greedy evaluation on held-out instances;
* :mod:`adapters.training` - config, recipes, the trainer loop, the update, checkpoints;
* :mod:`adapters.integrations` - TRL, an OpenAI-compatible policy server;
* command lines: ``python -m adapters.train``, ``python -m adapters.evaluate``,
  ``python -m adapters.view`` (the episode viewer), ``python -m adapters.serve`` (and
  ``serve_env``, ``serve_sandbox``); :mod:`adapters.cli` is what they share.

Importing this package (or any layer's package) does not import torch.
"""
