"""The integrations layer: the suite seen from other tools and protocols.

* :mod:`adapters.integrations.trl` - TRL's ``GRPOTrainer`` trains any setting through its
  ``rollout_func`` hook (whole multi-agent episodes, env tokens masked).
* :mod:`adapters.integrations.openai_server` - any local policy behind an OpenAI-compatible HTTP
  API (``python -m adapters.serve``).
"""
