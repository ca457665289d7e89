"""Reference builders for checks: Hugging Face modules from tiny configs, Llama and MoE pieces, kernel guard buffers."""
