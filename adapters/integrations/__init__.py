"""The integrations layer: the suite seen from other tools and protocols.

* :mod:`adapters.integrations.trl` - TRL's ``GRPOTrainer`` trains any setting through its
  ``rollout_func`` hook (whole multi-agent episodes, env tokens masked).
* :mod:`adapters.integrations.openenv` - every setting as an OpenEnv environment server
  (``python -m adapters.serve_env``), on openenv-core's own server and client classes;
  :mod:`adapters.integrations.openenv_sessions` its stateful HTTP (OpenEnv's simulation flow,
  HTTP sessions counted apart from WebSocket ones);
  :mod:`adapters.integrations.trl_openenv` trains through it with TRL's ``environment_factory``
  (:mod:`adapters.integrations.tool_template`: tool calling for SmolLM2 and ``tiny``);
  :mod:`adapters.integrations.openenv_mcp` is its MCP mode (the tool ``answer(completion)``).
* :mod:`adapters.integrations.sandbox_fusion` - a SandboxFusion-compatible ``/run_code`` service
  on our sandboxes (``python -m adapters.serve_sandbox``), for verl/MARTI/MAE reward functions;
  :mod:`adapters.integrations.languages` its compiled languages and files.
* :mod:`adapters.integrations._guard` - what both services bound before a request reaches them
  (token, body and frame caps, header timeout, connection limit): the threat model.
* :mod:`adapters.integrations.gymnasium_env` - one role of a setting as a single-agent
  Gymnasium env (``gymnasium.make("mas_rl_envs/<Setting>-<role>-v0")`` after ``import envs``;
  the ids: :mod:`envs.core.gymnasium_ids`), the other roles played by a policy.
* :mod:`adapters.integrations.openai_server` - any local policy behind an OpenAI-compatible HTTP
  API (``python -m adapters.serve``).
"""
