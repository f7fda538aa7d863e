"""Traffic planning: profiles, distributions, tokens, prompts, sessions, payloads."""
