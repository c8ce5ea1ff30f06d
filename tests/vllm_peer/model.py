"""A tiny Qwen3-shaped model directory for the vLLM peer: config, tokenizer, chat template.

Runs inside the peer venv (it needs ``tokenizers``). No weights: the scripted engine core
never loads any. The tokenizer is a byte-level BPE trained here, in well under a second, on
the scripted answers, with Qwen3's added tokens (``<think>``/``</think>`` and
``<tool_call>``/``</tool_call>`` as plain added tokens, ``<|im_start|>``/``<|im_end|>`` as
special ones, as in Qwen3's own tokenizer.json), so vLLM's qwen3 reasoning parser and hermes
tool parser find the token ids they look for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

# The shape of Qwen3's template: tools in a system block, <tool_call> JSON in assistant
# turns, tool results as user turns wrapped in <tool_response>.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{%- endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and tools %}"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}\n<tool_call>\n"
    "{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}\n"
    "</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def build(directory: Path, corpus: str, max_position_embeddings: int = 4096) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([corpus] * 3, trainer=trainer)
    tokenizer.add_tokens(ADDED)
    tokenizer.save(str(directory / "tokenizer.json"))
    vocab = tokenizer.get_vocab()
    eos = vocab["<|im_end|>"]
    vocab_size = ((len(vocab) + 63) // 64) * 64
    added = {str(vocab[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False, "special": t in SPECIAL} for t in SPECIAL + ADDED}
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }, indent=1), encoding="utf-8")
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab_size,
        "bos_token_id": vocab["<|endoftext|>"],
        "eos_token_id": eos,
    }, indent=1), encoding="utf-8")
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos], "pad_token_id": vocab["<|endoftext|>"]}),
                                                      encoding="utf-8")
    return directory


if __name__ == "__main__":  # python model.py DIR  (the corpus comes from script.py)
    sys.path.insert(0, str(Path(__file__).parent))
    import script

    build(Path(sys.argv[1]), script.corpus())
