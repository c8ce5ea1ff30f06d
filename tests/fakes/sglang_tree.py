"""SGLang's argument definitions as lines of its 0.5.23 wheel (sglang/srt/arg_groups/fields/*.py,
srt/server_args.py), for a tree laid out the way pip installs it."""

from __future__ import annotations

SERVING = '''from __future__ import annotations

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg


class Serving(msgspec.Struct):
    """Namespace ``serving``."""

    _NS_PATH = "serving"
    host: A[str, "The host of the HTTP server."] = "127.0.0.1"
    port: A[int, "The port of the HTTP server."] = 30000
'''


MODEL = '''class Model(msgspec.Struct):
    _NS_PATH = "model"
    model_path: A[
        str,
        Arg(
            help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
            aliases=["--model"],
        ),
    ]
'''


SERVER_ARGS = '''class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):

        add_cli_args_from_dataclass(parser, ServerArgs)

        # --- Configuration file support ---
        parser.add_argument(
            "--config",
            type=str,
            help="Read CLI options from a config file. Must be a YAML file with configuration options.",
        )
'''
