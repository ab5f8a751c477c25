"""A small AST mutation tester: does the test suite notice a change of behaviour?

Each mutant changes one site of one module (an operator, a comparison, a constant, a
boolean, a dropped statement), and a *fresh* pytest process runs the module's targeted
tests against a private copy of the project holding the mutant.  A fresh process per
mutant means every cached table (``functools.lru_cache``, ``cached_property``) is built
from the mutated code, and decorated functions are mutated like any other (two traps of
fork-based tools such as mutmut).

Usage::

    python3 tools/mutate.py --list                      # count the mutation sites per module
    python3 tools/mutate.py formats rounding --sample 30 --seed 1 --out mutants.json
    python3 tools/mutate.py gemm --sample 40 --jobs 2 --timeout 120

A mutant is *killed* when its tests fail (or time out), *survived* when they pass.  The
report lists every survivor with its site so that it can be judged equivalent (no input
can tell it apart) or answered with a new test.  Exit status 0; the JSON report holds the
details, the summary line per module the score.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Module groups: the files mutated and the tests that target them (run with ``-x``).  The
#: subsets are chosen to run in seconds; the exhaustive and float64-table-at-every-boundary
#: sweeps (minutes) are left out of every subset.
_CODEC = "tests/test_codec.py::"
_FAST = "tests/test_codec_fast.py::"
_PROPS = "tests/test_properties.py::"
_CORE_QUICK = ["tests/test_readme_conventions.py", "tests/test_mutation_kills.py",
               *(_PROPS + t for t in ("test_encode_is_monotonic", "test_encode_sign_symmetry",
                                      "test_stochastic_sign_symmetry", "test_quantize_is_idempotent",
                                      "test_every_code_decodes_and_reencodes_to_itself", "test_directed_modes_bracket_x",
                                      "test_stochastic_rounding_picks_a_neighbour_as_the_oracle_does")),
               _CODEC + "test_integer_inputs_exact", _CODEC + "test_special_values_spec_examples",
               _CODEC + "test_roundtrip_every_code"]
#: test_cpu_order.py without its live-torch subprocesses and torchao training runs
_CPU_ORDER_FAST = "not live_torch and not torchao_on_the_cpu and not empty_batch_is_empty"
GROUPS = {
    "formats": (["fp8emu/formats.py"],
                ["tests/test_reliability.py", "tests/test_docs.py", *_CORE_QUICK, _CODEC + "test_constants_match_ml_dtypes",
                 _CODEC + "test_values_match_ml_dtypes", _CODEC + "test_p3109_matches_gfloat",
                 _CODEC + "test_values_match_spec_formula", _CODEC + "test_registry_and_errors",
                 _CODEC + "test_unknown_format_lists_valid_names", _CODEC + "test_user_format_roundtrip"]),
    "rounding": (["fp8emu/rounding.py"],
                 [*_CORE_QUICK, _CODEC + "test_stochastic_exact_probabilities",
                  _FAST + "test_stochastic_f32_fast_path_vs_fraction_oracle"]),
    "tables": (["fp8emu/tables.py"],
               [*_CORE_QUICK, "tests/test_reliability.py", _FAST + "test_stochastic_f32_fast_path_matches_exact_core",
                _FAST + "test_chunk_boundaries", _FAST + "test_chunked_decode_matches_ml_dtypes",
                _CODEC + "test_decode_errors", _CODEC + "test_bad_inputs", _CODEC + "test_input_not_modified_and_shapes",
                _CODEC + "test_array_protocol_and_quantize_dtypes",
                _CODEC + "test_decode_matches_ml_dtypes_and_accepts_ml_arrays", _CODEC + "test_random_f32_vs_ml_dtypes"]),
    "codec": (["fp8emu/codec.py", "fp8emu/random_bits.py"],
              [*_CORE_QUICK, "tests/test_reliability.py", _FAST + "test_stochastic_f32_fast_path_matches_exact_core",
               _FAST + "test_stochastic_f32_fast_path_vs_fraction_oracle", _FAST + "test_draw_bits_is_the_documented_stream",
               _FAST + "test_stochastic_rng_stream_across_chunks", _FAST + "test_chunk_boundaries",
               _CODEC + "test_stochastic_exact_probabilities", _CODEC + "test_stochastic_reproducible_and_unbiased",
               _CODEC + "test_stochastic_bits_documented_stream", _CODEC + "test_stochastic_errors",
               _CODEC + "test_bad_inputs", _CODEC + "test_input_not_modified_and_shapes",
               _CODEC + "test_array_protocol_and_quantize_dtypes", _CODEC + "test_decode_errors",
               _CODEC + "test_via_float32_reproduces_ml_dtypes_double_rounding", _CODEC + "test_random_f32_vs_ml_dtypes"]),
    "profiles": (["fp8emu/profiles/__init__.py", "fp8emu/profiles/profile.py", "fp8emu/profiles/versions.py",
                  "fp8emu/profiles/fixes.py"],
                 ["tests/test_profiles.py", "tests/test_mutation_kills.py", "tests/test_engines.py",
                  # the whole file but its demo-checkpoint rebuild (8 s, no profile in it)
                  "tests/test_library_versions.py",
                  "--deselect=tests/test_library_versions.py::test_demo_checkpoint_reproduces_byte_for_byte",
                  *(f"tests/test_docs.py::test_docstring_examples[fp8emu.profiles{m}]"
                    for m in ("", ".profile", ".versions", ".fixes")),
                  *("tests/test_architecture.py::" + t for t in (
                      "test_user_profile_named_like_a_builtin_uses_its_own_rules",
                      "test_user_profile_fix_and_decode_fix_are_called", "test_lookalike_format_is_not_the_builtin",
                      "test_profile_rejects_malformed_rules")),
                  "tests/test_cli.py::test_formats_and_profiles_listings"]),
    "scaling": (["fp8emu/scaling/tensor.py", "fp8emu/scaling/current.py", "fp8emu/scaling/delayed.py",
                 "fp8emu/scaling/mx.py", "fp8emu/scaling/nvfp4.py", "fp8emu/scaling/hadamard.py"],
                ["tests/test_scaling.py", "tests/test_mutation_kills.py", "tests/test_reliability.py",
                 "tests/test_recipes.py", "tests/test_scaling_chunks.py", "tests/test_block_scaled.py",
                 "tests/test_layouts.py", "tests/test_scaling_errors.py",
                 "tests/test_properties.py::test_scaling_recipes_dequantize_within_half_a_unit",
                 "tests/test_properties.py::TestDelayedScalingModel"]),
    "gemm": (["fp8emu/gemm/models.py", "fp8emu/gemm/kernels.py", "fp8emu/gemm/routes/wide.py", "fp8emu/gemm/fparith.py",
              "fp8emu/gemm/scaled_mm.py", "fp8emu/gemm/block_scaled.py", "fp8emu/gemm/epilogue.py"],
             ["tests/test_gemm.py", "tests/test_mutation_kills.py", "tests/test_reliability.py",
              "tests/test_block_scaled.py", "tests/test_fparith.py", "tests/test_tc_recordings.py",
              "tests/test_properties.py::test_scaled_mm_exact_equals_a_rational_sum"]),
    "readers": (["fp8emu/readers.py"],
                ["tests/test_readers.py", "tests/test_hostile_files.py", "tests/test_fuzz_readers.py",
                 "tests/test_roundtrip_metadata.py::test_golden_save_load_keeps_every_field",
                 "tests/test_docs.py::test_docstring_examples[fp8emu.readers]",
                 *("tests/test_study.py::" + t for t in (
                     "test_safetensors_reader_returns_exact_values_and_dtypes", "test_npz_and_npy_folder_readers",
                     "test_bad_inputs_are_clear_errors", "test_safetensors_read_without_the_safetensors_package"))]),
    "attention": (["fp8emu/attention/emulate.py", "fp8emu/attention/recipes.py", "fp8emu/attention/operands.py",
                   "fp8emu/attention/report.py", "fp8emu/attention/reference.py", "fp8emu/attention/inputs.py"],
                  ["tests/test_attention.py", "tests/test_attention_options.py", "tests/test_reliability.py",
                   "tests/test_attention_lab.py",
                   *(f"tests/test_docs.py::test_docstring_examples[fp8emu.attention{m}]"
                     for m in ("", ".emulate", ".recipes", ".operands", ".report", ".reference"))]),
    # the instruction catalogue, split out of gemm/instructions.py (same bits): the catalogue as data,
    # each datapath's reference step, the fast routes, the public API.  The live-MMA-Sim tests are
    # left out (a minute a run, and the recorded MMA-Sim vectors of test_instructions.py hold the
    # same comparison); the fast files run first so that -x stops a killed mutant early.
    "instructions": (["fp8emu/gemm/catalogue.py", "fp8emu/gemm/datapaths.py", "fp8emu/gemm/instructions.py",
                      *(f"fp8emu/gemm/routes/{m}.py" for m in ("__init__", "codes", "steps", "layout", "workspace",
                                                                "tables", "operands", "exact", "groups"))],
                     ["tests/test_accumulator_semantics.py", "tests/test_instruction_catalogue.py",
                      "tests/test_instruction_rules.py",
                      "tests/test_gemm_routes.py",
                      "tests/test_instructions.py", "tests/test_tc_recordings.py",
                      "tests/test_gemm_exact_paths.py", "tests/test_block_scaled.py",
                      *(f"tests/test_docs.py::test_docstring_examples[fp8emu.gemm.{m}]"
                        for m in ("catalogue", "datapaths", "instructions")),
                      "-k", "not live_mmasim"]),
    # issue 53: the 2026 formats, torchao's variants, MS-EDEN and the training recipes, each
    # against its own test files (the recipes' training tests need torch: run that group in a venv that has it)
    "hifloat": (["fp8emu/hifloat.py"],
                ["tests/test_hifloat.py", "tests/test_docs.py::test_docstring_examples[fp8emu.hifloat]"]),
    "torchao_variants": (["fp8emu/scaling/torchao_variants.py"],
                         ["tests/test_scaling_torchao.py",
                          "tests/test_docs.py::test_docstring_examples[fp8emu.scaling.torchao_variants]"]),
    "ms_eden": (["fp8emu/scaling/ms_eden.py"],
                ["tests/test_ms_eden.py", "tests/test_docs.py::test_docstring_examples[fp8emu.scaling.ms_eden]"]),
    "training_recipes": (["fp8emu/training/recipes.py"],
                         ["tests/test_mut_training_recipes.py", "tests/test_training_recipes.py",
                          "tests/test_torch_audit.py", "tests/test_k_drift.py",
                          "tests/test_torch_emulate.py",
                          # reads figures/, which the mutants' copies leave out
                          "--deselect=tests/test_k_drift.py::test_section_names_the_committed_figure_and_tool",
                          "tests/test_docs.py::test_docstring_examples[fp8emu.training.recipes]"]),
    # the torch adapter's layer, its swap and torch's CPU GEMM.  The layer's
    # subset keeps one or two stacks per recipe of the hand-composition and zero-padding sweeps (the
    # others repeat the same code of linear.py on another stack) and drops the thread-count sweep.
    "torch_linear": (["fp8emu/torch/linear.py"],
                     ["tests/test_mut_torch_linear.py", "tests/test_torch_emulate.py", "tests/test_torch_inference.py",
                      "tests/test_torch_autocast.py",
                      "tests/test_torchao_float8linear.py",
                      # the audits' fast layer tests (about 9 s together; the torch.compile ones are left out)
                      *(f"tests/test_audit_{t}.py" for t in (
                          "activation_checkpointing", "checkpoint_recompute_limits", "compile_to_empty",
                          "compiled_copy", "compiled_pending", "compiled_hooks", "double_backward",
                          "func_transforms", "layer_float64_range", "scalar_input", "te_inputs", "empty_layers",
                          "hooks_parametrizations", "delayed_state_casts", "delayed_state_dtype", "float64_weights")),
                      "-k",
                      "not (hand_composition and (b200 or fast or te-delayed-cpu or te-current-cpu or deepseek "
                      "or te-nvfp4-no)) and not (thread_count and True) and not (zero_padded_batch and "
                      "(fast or exact or nvfp4-no))"]),
    # the swap: its own tests (filters, attention, refusals, reports, diagnostics) and one
    # hand-composed step per kind of multiple (per-tensor, MX, NVFP4, torchao on the CPU)
    "torch_swap": (["fp8emu/torch/swap.py"],
                   ["tests/test_mut_torch_swap.py", "tests/test_torch_filter.py", "tests/test_torch_audit.py",
                    "tests/test_torch_autocast.py",
                    *("tests/test_torch_emulate.py::" + t for t in (
                        "test_the_combinations_cover_every_recipe_on_hopper_or_blackwell",
                        "test_diagnostics_rows_count_nan_saturation_and_error", "test_diagnostics_off_records_nothing",
                        "test_underflow_and_flushed_fractions", "test_wrapping_twice_names_the_layer",
                        "test_layers_the_recipe_cannot_take_are_skipped_with_the_multiple",
                        "test_a_token_count_the_wgrad_cannot_take_is_refused_naming_the_layer",
                        "test_unknown_names_and_bad_objects", "test_an_old_torch_is_refused_with_the_version_needed",
                        "test_same_seed_same_bits_and_another_seed_other_bits",
                        "test_block_fp8_refusals_name_their_source",
                        *(f"test_every_pass_equals_the_hand_composition[{c}]" for c in (
                            "te-delayed-h100", "te-mxfp8-b200", "te-nvfp4-b200", "torchao-rowwise-cpu")))),
                    "tests/test_torch_inference.py::test_encoder_layer_fast_path_no_longer_bypasses_the_emulated_layers",
                    "tests/test_docs.py::test_docstring_examples[fp8emu.torch.swap]"]),
    # torch's CPU GEMM: recorded and live torch vectors of both paths, the sgemm's FMA chains, torchao's
    # emulated GEMM against the recorded Float8Linear outputs (the live torchao layer tests, a minute on
    # the shared machine, run the same GEMM through the layer: left to the torch_linear group)
    "torch_cpu": (["fp8emu/gemm/torch_cpu.py"],
                  ["tests/test_mut_torch_cpu.py", "tests/test_sgemm_fma_chain.py", "tests/test_torch_cpu_scaled_mm.py",
                   "tests/test_torchao_float8linear.py::test_torchao_emulate_divides_where_scaled_mm_multiplies",
                   "tests/test_torchao_float8linear.py::test_first_gemm_equals_the_recorded_torchao_output_with_numpy_only",
                   "tests/test_docs.py::test_docstring_examples[fp8emu.gemm.torch_cpu]"]),
    # the summation-tree probe and the CPU order policy: their own fast tests (the live-torch sweeps in
    # fresh processes and the torchao training runs, minutes on the shared machine, are left out)
    "sumtree": (["fp8emu/gemm/sumtree.py", "fp8emu/gemm/order_probe.py"],
                ["tests/test_mut_cpu_order.py", "tests/test_cpu_order.py", "tests/test_sgemm_fma_chain.py",
                 "tests/test_audit_cpu_order_k1_zero_sign.py", "tests/test_audit_reveal_zero_start_per_output.py",
                 "tests/test_audit_sumtree_fma_start.py", "tests/test_audit_sumtree.py", "tests/test_audit_sumtree_eval.py",
                 "tests/test_audit_sumtree_json.py", "tests/test_audit_sumtree_operands.py",
                 "tests/test_audit_check_order_type.py", "tests/test_cpu_order_lone_product.py",
                 "tests/test_audit_sumtree_describe_lone.py", "tests/test_audit_sumtree_split_lone.py",
                 "tests/test_audit_sumtree_deep.py", "tests/test_audit_reveal_lone_checks.py",
                 "tests/test_audit_gemm_order_limits.py",
                 "tests/test_docs.py::test_docstring_examples[fp8emu.gemm.sumtree]",
                 "tests/test_docs.py::test_docstring_examples[fp8emu.gemm.order_probe]", "-k", _CPU_ORDER_FAST]),
    "cpu_order": (["fp8emu/gemm/cpu_order.py"],
                  ["tests/test_mut_cpu_order.py", "tests/test_cpu_order.py", "tests/test_sgemm_fma_chain.py",
                   "tests/test_cpu_order_lone_product.py", "tests/test_audit_cpu_order_cache.py",
                   "tests/test_lead_input_checks.py", "tests/test_cpu_order_amd.py",
                   "tests/test_audit_cpu_order_numpy_sizes.py", "tests/test_audit_reveal_budget.py",
                   "tests/test_audit_cpu_order_gemv_revealed.py",
                   "tests/test_docs.py::test_docstring_examples[fp8emu.gemm.cpu_order]", "-k", _CPU_ORDER_FAST]),
    # TE's modules' GEMM state and activation checkpointing (fp8emu.torch.te): the API's tests, primary weights,
    # checkpointing and the audits' TE tests (the compile and thread ones, minutes on the shared machine, left out)
    "te_gemm": (["fp8emu/torch/te/gemm.py", "fp8emu/torch/te/distributed.py"],
                ["tests/test_te_api.py", "tests/test_te_primary.py", "tests/test_te_checkpoint.py",
                 *(f"tests/test_audit_te_{t}.py" for t in (
                     "attention_empty", "autocast_decorator", "delayed_state_dtype", "float64_range",
                     "inference_mode", "inputs", "meta_weights", "microbatch_recipes", "primary_data_writes",
                     "recipe_fields", "torch_autocast", "checkpoint", "state_dict_claim")),
                 "tests/test_docs.py::test_docstring_examples[fp8emu.torch.te.gemm]",
                 "tests/test_docs.py::test_docstring_examples[fp8emu.torch.te.distributed]"]),
    # the same-state gradient probes: their own tests and the hostile-input ones
    "torch_probes": (["fp8emu/torch/probes.py"],
                     ["tests/test_mut_torch_probes.py", "tests/test_grad_probes.py",
                      *("tests/test_audit_grad_study.py::" + t for t in (
                          "test_probe_operands_are_float32_as_the_reference_reads_them",
                          "test_probe_operand_shapes_are_named", "test_capture_names_what_it_cannot_probe")),
                      # the audits' probe tests (about 7 s together)
                      *(f"tests/test_audit_{t}.py" for t in (
                          "capture_checkpointing", "capture_grad_mode", "capture_grads", "capture_loss_backward",
                          "capture_te_modules", "capture_tied_weight", "exact_accumulation_name", "probe_inputs",
                          "probe_strides", "probe_tensor_kinds", "probe_tokens", "empty_layers",
                          "hooks_parametrizations", "capture_global_hooks", "capture_grad_hooks")),
                      "tests/test_docs.py::test_docstring_examples[fp8emu.torch.probes]"]),
    # the gradient study's numbers, findings and report (torch-free): its test files and its doctests,
    # less the one-and-two-threads-and-dask run (45 s of training cells that reach this module only
    # through compare / mean_curve / norm, which the other tests pin)
    "grad_study": (["fp8emu/lab/grad_study.py", "fp8emu/lab/grad_metrics.py"],
                   ["tests/test_mut_grad_study.py", "tests/test_grad_study.py", "tests/test_audit_grad_study.py",
                    "tests/test_audit_grad_metrics.py", "tests/test_audit_grad_compare_shapes.py",
                    "tests/test_audit_grad_study_metric_inputs.py", "tests/test_audit_grad_metrics_inputs.py",
                    # the audits' table and figure tests (about 7 s together)
                    *(f"tests/test_audit_grad_study_{t}.py" for t in (
                        "table_cells", "nan_figures", "tables", "csv", "shared_tables", "stale_tables", "infinite")),
                    "tests/test_docs.py::test_docstring_examples[fp8emu.lab.grad_study]",
                    "tests/test_docs.py::test_docstring_examples[fp8emu.lab.grad_metrics]",
                    "-k", "not same_bits_on_one_and_two_threads_and_on_dask"]),
}

_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
               ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
               ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.BitAnd: ast.BitOr,
               ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr}
_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.If, ast.Raise, ast.For)


@dataclass
class Site:
    index: int
    line: int
    kind: str
    text: str


@dataclass
class Result:
    group: str
    path: str
    index: int
    line: int
    kind: str
    text: str
    status: str          # killed, survived, timeout, error
    seconds: float
    detail: str = ""


def _is_dunder_all(node) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _is_docstring(node, parent) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


class _Mutator(ast.NodeTransformer):
    """Visits every mutation site in a fixed order; mutates the one numbered ``target``
    (or, with ``target=None``, only records the sites)."""

    def __init__(self, target=None):
        self.target = target
        self.sites: list[Site] = []
        self.done = False

    def _site(self, node, kind, text) -> bool:
        i = len(self.sites)
        self.sites.append(Site(i, getattr(node, "lineno", 0), kind, text))
        return i == self.target

    # -- skip what is not behaviour
    def visit_ImportFrom(self, node):
        return node

    def visit_Import(self, node):
        return node

    def visit_Assign(self, node):
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return node
        return self.generic_visit(node)

    def visit_JoinedStr(self, node):      # f-string messages
        return node

    def visit_arg(self, node):            # annotations are never evaluated (PEP 563)
        return node

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_FunctionDef(self, node):
        # node.returns is an annotation: not visited
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        node.body = self._body(node.body)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    # -- operators
    def visit_BinOp(self, node):
        self.generic_visit(node)
        new = _BINOP_SWAP.get(type(node.op))
        if new and self._site(node, "binop", f"{type(node.op).__name__} -> {new.__name__}"):
            node.op = new()
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        new = _BINOP_SWAP.get(type(node.op))
        if new and self._site(node, "augassign", f"{type(node.op).__name__}= -> {new.__name__}="):
            node.op = new()
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        for j, op in enumerate(node.ops):
            new = _CMP_SWAP.get(type(op))
            if new and self._site(node, "compare", f"{type(op).__name__} -> {new.__name__}"):
                node.ops[j] = new()
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, "boolop", f"{type(node.op).__name__} -> {new.__name__}"):
            node.op = new()
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "not", "not x -> x"):
            return node.operand
        if isinstance(node.op, ast.USub) and self._site(node, "neg", "-x -> x"):
            return node.operand
        return node

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            if self._site(node, "bool", f"{v} -> {not v}"):
                return ast.copy_location(ast.Constant(not v), node)
        elif isinstance(v, (int, float)):
            if self._site(node, "const", f"{v!r} -> {v + 1!r}"):
                return ast.copy_location(ast.Constant(v + 1), node)
            if self._site(node, "const", f"{v!r} -> {v - 1!r}"):
                return ast.copy_location(ast.Constant(v - 1), node)
        return node

    def _negate_test(self, node, what):
        if self._site(node, "negate", f"{what} test negated"):
            node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)

    def visit_If(self, node):
        self.generic_visit(node)
        self._negate_test(node, "if")
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        self._negate_test(node, "while")
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        self._negate_test(node, "conditional expression")
        return node

    # -- dropped statements
    def _body(self, body):
        out = []
        for k, stmt in enumerate(body):
            stmt = self.visit(stmt)
            if (isinstance(stmt, _DROPPABLE) and not _is_docstring(stmt, None) and len(body) > 1
                    and not _is_dunder_all(stmt)
                    and self._site(stmt, "drop", f"statement dropped: {ast.unparse(stmt).splitlines()[0][:60]}")):
                stmt = ast.copy_location(ast.Pass(), stmt)
            out.append(stmt)
        return out

    def generic_visit(self, node):
        for field, old in ast.iter_fields(node):
            if isinstance(old, list) and old and isinstance(old[0], ast.stmt):
                setattr(node, field, self._body(old))
            elif isinstance(old, list):
                new = []
                for item in old:
                    if isinstance(item, ast.AST):
                        item = self.visit(item)
                        if item is None:
                            continue
                    new.append(item)
                old[:] = new
            elif isinstance(old, ast.AST):
                setattr(node, field, self.visit(old))
        return node

    def visit_Expr(self, node):
        if _is_docstring(node, None):
            return node
        return self.generic_visit(node)


def sites(path: str) -> list[Site]:
    tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
    m = _Mutator()
    m.visit(tree)
    return m.sites


def mutant_source(path: str, index: int) -> str:
    tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
    m = _Mutator(index)
    tree = m.visit(copy.deepcopy(tree))
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


def _copy_project(dst):
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis", "figures", "notebooks", "*.png"))


@contextmanager
def _scratch_copy(prefix):
    """A private copy of the project in a temporary folder, removed afterwards."""
    w = tempfile.mkdtemp(prefix=prefix)
    try:
        shutil.rmtree(w)
        _copy_project(w)
        yield w
    finally:
        shutil.rmtree(w, ignore_errors=True)


_CACHE = ".mutate-fp8emu-cache"


def _snapshot_cache(workdir):
    """The cache folder's files after the baseline run (name -> bytes)."""
    d = os.path.join(workdir, _CACHE)
    if not os.path.isdir(d):
        return {}
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)
            if os.path.isfile(os.path.join(d, n))}


def _reset_cache(workdir, snapshot):
    d = os.path.join(workdir, _CACHE)
    shutil.rmtree(d, ignore_errors=True)
    if snapshot:
        os.makedirs(d)
        for n, data in snapshot.items():
            with open(os.path.join(d, n), "wb") as fh:
                fh.write(data)


def _run_tests(workdir, tests, timeout):
    # FP8EMU_CACHE: the revealed CPU summation orders (fp8emu.gemm.cpu_order) go to the copy's own
    # folder, reset to the baseline run's after each mutant (_reset_cache): a mutant of the order's
    # code must poison neither the user's cache nor the next mutant's
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0",
               FP8EMU_CACHE=os.path.join(workdir, _CACHE))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore",
           "--hypothesis-seed=0", *tests]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0, ""
    tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
    if p.returncode == 0:
        return "survived", time.time() - t0, tail[0]
    # any failure kills: test failures (1), a collection error (2), an internal error (3), and
    # "found no collectors" (4) when the mutant breaks a module's import (the baseline run
    # proved the command itself is valid)
    return "killed", time.time() - t0, tail[0]


def run_group(group, sample, seed, timeout, jobs, progress=True):
    paths, tests = GROUPS[group]
    all_sites = [(p, s) for p in paths for s in sites(p)]
    rng = random.Random(f"{seed}-{group}")
    chosen = sorted(rng.sample(all_sites, min(sample, len(all_sites))), key=lambda ps: (ps[0], ps[1].index))
    results: list[Result] = []
    with ExitStack() as stack:
        workdirs = [stack.enter_context(_scratch_copy(f"mutate-{group}-")) for _ in range(jobs)]
        status, base, detail = _run_tests(workdirs[0], tests, timeout * 4)
        if status != "survived":
            raise SystemExit(f"{group}: the unmutated tests do not pass ({status}: {detail})")
        cache = _snapshot_cache(workdirs[0])
        limit = max(timeout, 3 * base)
        if progress:
            print(f"{group}: {len(all_sites)} sites, {len(chosen)} sampled, baseline {base:.1f}s, "
                  f"timeout {limit:.0f}s", file=sys.stderr, flush=True)
        free = list(workdirs)

        def one(item):
            path, site = item
            w = free.pop()
            try:
                target = os.path.join(w, path)
                original = open(target, encoding="utf-8").read()
                try:
                    with open(target, "w", encoding="utf-8") as fh:
                        fh.write(mutant_source(path, site.index))
                    _reset_cache(w, cache)
                    status, secs, detail = _run_tests(w, tests, limit)
                finally:
                    with open(target, "w", encoding="utf-8") as fh:
                        fh.write(original)
            finally:
                free.append(w)
            r = Result(group, path, site.index, site.line, site.kind, site.text, status, round(secs, 1), detail)
            if progress:
                print(f"  {status:8} {path}:{site.line} [{site.index}] {site.text}", file=sys.stderr, flush=True)
            return r

        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(one, chosen))
    return results


def check_mutants(specs, tests, timeout, jobs):
    """Run ``tests`` against each mutant ``"path:index"`` (a survivor's second look); print a line each.

    The tests must pass on an unmutated copy first: the copy leaves out notebooks and figures,
    so tests that read those would "kill" every mutant.
    """
    with _scratch_copy("mutate-check-") as w:
        status, _, detail = _run_tests(w, tests, timeout)
    if status != "survived":
        raise SystemExit(f"the unmutated tests do not pass in a copy ({status}: {detail}); leave out the "
                         "tests that need notebooks or figures")

    def one(spec):
        path, _, index = spec.rpartition(":")
        with _scratch_copy("mutate-check-") as w:
            with open(os.path.join(w, path), "w", encoding="utf-8") as fh:
                fh.write(mutant_source(path, int(index)))
            status, secs, detail = _run_tests(w, tests, timeout)
        return f"{status:8} {spec}  ({secs:.0f} s) {detail}"

    with ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(one, specs):
            print(line, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", default=list(GROUPS), help=f"module groups ({', '.join(GROUPS)})")
    ap.add_argument("--sample", type=int, default=30, help="mutants per group (default 30)")
    ap.add_argument("--seed", default="1", help="sampling seed")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per mutant (at least 3x the baseline)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run in parallel")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--list", action="store_true", help="only count the sites")
    ap.add_argument("--check", nargs="+", metavar="PATH:INDEX",
                    help="instead of sampling: run --tests against these mutants (e.g. survivors)")
    ap.add_argument("--tests", nargs="+", default=["tests"], help="test files for --check (default: tests)")
    args = ap.parse_args(argv)
    if args.check:
        check_mutants(args.check, args.tests, args.timeout, args.jobs)
        return 0
    for g in args.groups:
        if g not in GROUPS:
            ap.error(f"unknown group {g!r}; choose from {', '.join(GROUPS)}")
    if args.list:
        for g in args.groups:
            n = sum(len(sites(p)) for p in GROUPS[g][0])
            print(f"{g:9} {n:5} sites in {', '.join(GROUPS[g][0])}")
        return 0
    everything = []
    for g in args.groups:
        res = run_group(g, args.sample, args.seed, args.timeout, args.jobs)
        everything += res
        killed = sum(r.status in ("killed", "timeout") for r in res)
        print(f"{g:9} killed {killed}/{len(res)}  survivors: "
              + ", ".join(f"{r.path}:{r.line} {r.text}" for r in res if r.status == "survived"), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump([asdict(r) for r in everything], fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
