"""Model configurations shipped with the project (JSON files; see adapters.policies.models)."""
