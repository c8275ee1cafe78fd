"""Training with TRL, PEFT and accelerate: one module per trainer.

- `config`: every default with its help text (the `mascot train` flags are generated from it);
- `reward_model`, `group_reward_model`: scalar reward models (TRL RewardTrainer);
- `speaker_grpo`, `director_grpo`: GRPO policies (TRL GRPOTrainer), `rewards`: their reward functions;
- `director_dpo`: the offline Director alternative (TRL DPOTrainer);
- `merge`: adapters merged into full checkpoints;
- `data`, `models`, `runtime`, `scoring`, `common`, `artefact`: what the trainers share (records in,
  hardware and batch plan, scoring with a reward model, the artefact folder and its metadata).

Importing this package is cheap; torch, transformers and TRL load when a trainer runs.
"""
