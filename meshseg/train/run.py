"""The run: from the composed config to a trained, evaluated and saved model.

`run` is the only code that sees the configuration as a whole. It checks it, claims the
run directory, builds the data, the model and the loop, and hands the steps to the
`Controller`; everything below it receives built objects or plain typed values.
"""

import copy
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from meshseg.config import (LossConfig, ModelConfig, OptimizerConfig, TrainConfig, check,
                            test_evaluations)
from meshseg.console import runnable_command, shell_command
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.pipeline.dataset import sample_meshes
from meshseg.data.pipeline.sources import DataInfo, build_datasets, evaluation_dataset
from meshseg.errors import DataError, OutputError
from meshseg.nn.networks import build_network
from meshseg.outputs import write_atomically, write_failure_cause, writing
from meshseg.nn.ops import xla_formulation
from meshseg.train.loop.autotune import choose_impl
from meshseg.train.loop.controller import Controller, Loop, Schedule
from meshseg.train.loop.custom_loop import CustomLoop
from meshseg.train.device.distribute import (barrier, check_same_start, is_chief, is_replicated,
                                             shard_input, worker_position)
from meshseg.train.loop.evaluate import evaluate, make_predict_step
from meshseg.train.logs.hparams import log_hparams
from meshseg.train.loop.keras_loop import KerasLoop
from meshseg.train.logs.mesh_summaries import MeshSummaries
from meshseg.train.device.precision import resolved_precision, visible_gpus
from meshseg.train.loop.metrics import MaskedCrossEntropy, class_weights
from meshseg.train.rundir.claim import (CHECKPOINT_DIR, MODEL_FILE, SUMMARY_FILE,
                                        accept_hydra_record, check_resume, claim_run_dir,
                                        drop_hydra_record, record_or_check_data)
from meshseg.train.rundir.runlock import holds_run_dir, release_run_dir
from meshseg.train.logs.summaries import peak_rss_mib, step_times
from meshseg.train.rundir.summary import RunSummary

log = logging.getLogger(__name__)
DATA_PATHS = ("root", "cache_dir", "train_files", "test_files")
TEST_SCHEDULE_LOG = {
    "never": "not scored (eval.test=never, or auto with a validation split); "
             "score it once with eval.test=final",
    "final": "scored once, at the last step (eval.test=final)",
    "every": "scored at every evaluation"}
RESUME_HINT = "the checkpoints written before stay: free space and run the same command to resume"


def typed_config(composed: TrainConfig) -> TrainConfig:
    """A copy of the composed settings, checked (`meshseg.config.check`), with the data
    paths made absolute against the working directory (the one train.py started in:
    `hydra.job.chdir` is false) and `precision=auto` resolved for this machine's GPUs or
    CPU (`meshseg.train.device.precision`; logged either way, and with a GPU, that `threads` and
    `inter_op_threads` apply to the CPU only).

    Raises:
      ConfigError: for a value the checks refuse, or a resume directory without a run.
    """
    check(composed)
    config = copy.deepcopy(composed)
    for key in DATA_PATHS:
        if getattr(config.data, key) is not None:
            setattr(config.data, key, os.path.abspath(getattr(config.data, key)))
    if config.resume is not None:
        check_resume(os.path.abspath(config.resume), config.resume)
    gpus = visible_gpus()
    config.precision, why = resolved_precision(config.precision, gpus)
    log.info("precision %s (%s)", config.precision, why)
    if gpus and (config.threads or config.inter_op_threads):
        log.info("threads=%d, inter_op_threads=%d size TensorFlow's CPU thread pools only: "
                 "the step's GPU kernels do not use them", config.threads,
                 config.inter_op_threads)
    return config


def load_data(config: TrainConfig):
    """`meshseg.data.pipeline.sources.build_datasets` of the run's data settings.

    Raises:
      ConfigError: for a missing path or glob, or labels that do not fit num_classes.
      DataError: for a mesh that does not convert or a bad record (the message names the
        file, and shard and record).
    """
    try:
        return build_datasets(config.data, seed=config.seed, jit=config.jit)
    except tf.errors.OpError as error:
        raise DataError(error.message) from None


def build_model(num_classes: int, impl: str, model: ModelConfig, precision: str,
                jit: bool, inputs: MeshInputs = MeshInputs()) -> keras.Model:
    """The network `model.name` chooses (`meshseg.nn.networks`) for the inputs `inputs`
    builds (`MeshInputs.of(config.data)`), with its layers in the `precision` policy (the
    logits stay float32), its variables created. Call inside the strategy's scope."""
    network = build_network(num_classes, impl, dataclasses.asdict(model),
                            input_width=inputs.width, xla=jit, precision=precision)
    network.build_from_config({})
    return network


def learning_rate_schedule(settings: OptimizerConfig, steps: int
                           ) -> keras.optimizers.schedules.LearningRateSchedule:
    """`optimizer.schedule`: "exponential" (learning_rate * decay_rate ** (step /
    decay_steps), the demo's) or "cosine" (linear warm-up from 0 to learning_rate over
    `warmup_steps`, then cosine decay to 0 at step `steps`; Loshchilov & Hutter, SGDR,
    ICLR 2017, as Keras' `CosineDecay` with warm-up)."""
    if settings.schedule == "exponential":
        return keras.optimizers.schedules.ExponentialDecay(
            settings.learning_rate, settings.decay_steps, settings.decay_rate)
    warmup = min(settings.warmup_steps, steps - 1)
    return keras.optimizers.schedules.CosineDecay(
        0.0 if warmup else settings.learning_rate, max(steps - warmup, 1),
        warmup_target=settings.learning_rate if warmup else None, warmup_steps=warmup)


def build_optimizer(model: keras.Model, settings: OptimizerConfig, precision: str,
                    steps: int) -> keras.optimizers.Optimizer:
    """Adam, or AdamW with decoupled weight decay (Loshchilov & Hutter, ICLR 2019), on the
    `learning_rate_schedule` for a run of `steps` steps, wrapped in a LossScaleOptimizer
    for mixed_float16, its variables created. Call inside the strategy's scope."""
    schedule = learning_rate_schedule(settings, steps)
    if settings.name == "adamw":
        optimizer = keras.optimizers.AdamW(schedule, weight_decay=settings.weight_decay,
                                           beta_1=settings.beta_1, epsilon=settings.epsilon)
    else:
        optimizer = keras.optimizers.Adam(schedule, beta_1=settings.beta_1,
                                          epsilon=settings.epsilon)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def build_loss(settings: LossConfig, train_histogram: np.ndarray) -> MaskedCrossEntropy:
    """The `loss` settings' loss, class weights from the training split's class histogram."""
    return MaskedCrossEntropy(settings.label_smoothing,
                              class_weights(train_histogram, settings.class_weights))


def build_loop(config: TrainConfig, model: keras.Model, optimizer: keras.optimizers.Optimizer,
               dataset: tf.data.Dataset, strategy: tf.distribute.Strategy,
               train_histogram: np.ndarray) -> Loop:
    """The `loop` group's loop over the training batches, with the run's loss (and, with
    `profile=true`, its profiler)."""
    loss = build_loss(config.loss, train_histogram)
    profile_steps = config.profile_steps if config.profile else None
    if config.loop.name == "custom":
        return CustomLoop(model, optimizer, dataset, strategy, config.jit, loss, profile_steps)
    return KerasLoop(model, optimizer, dataset, config.jit, loss, profile_steps)


def choose_implementation(config: TrainConfig, train_data: tf.data.Dataset) -> str:
    """`impl.name`, or for impl=auto the fastest candidate on the first batch."""
    impl = config.impl.name
    if impl == "auto":
        features, labels = next(iter(train_data))
        impl = choose_impl(features, labels, config.jit, config.data.num_classes,
                           dataclasses.asdict(config.model),
                           config.impl.candidates, config.impl.timing_steps,
                           config.impl.cache_file)
    if config.jit:
        log.info("impl=%s under XLA uses %s", impl, xla_formulation(impl))
    return impl


def run(composed: TrainConfig, run_dir: str, strategy: tf.distribute.Strategy) -> RunSummary:
    """Trains and evaluates as configured.

    Writes event files, checkpoints, `summary.json` and `model.keras` under `run_dir`, or
    under `composed.resume` when set. A run directory that already holds this run (same
    settings) is resumed from its latest checkpoint; one that holds its finished run is
    left as it is.

    Args:
      composed: the composed settings (`conf/train.yaml`; train.py's
        `meshseg.config.checked_config`), recorded as given in `run_config.yaml`.
      run_dir: the run directory (Hydra's output directory).
      strategy: the strategy `meshseg.train.device.distribute.configure_runtime` made before
        TensorFlow's runtime started (train.py does this); TensorFlow's default strategy
        for one device.

    Returns:
      the `RunSummary`.

    Raises:
      ConfigError, RunDirError: before any output is written.
      DataError: for a mesh or record that cannot be read (before training).
      NonFiniteError, Interrupted: from training (a checkpoint is kept).
      OutputError: an event file, checkpoint, summary or the model cannot be written (a
        full disk, a read-only folder), naming the path and the cause; the checkpoints
        written before stay.
    """
    start = time.perf_counter()
    config = typed_config(composed)
    if config.resume is not None:
        run_dir = os.path.abspath(config.resume)
    held = holds_run_dir(run_dir)  # train.py took the lock before Hydra wrote
    try:
        return _run_claimed(composed, config, run_dir, strategy, start)
    finally:
        drop_hydra_record(run_dir)  # a launch refused before `accept_hydra_record`
        if not held:  # taken by `claim_run_dir`, for this call only
            release_run_dir(run_dir)


def _run_claimed(composed: TrainConfig, config: TrainConfig, run_dir: str,
                 strategy: tf.distribute.Strategy, start: float) -> RunSummary:
    """`run` from the seed on; the run directory is claimed (and locked) once the data
    are built."""
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    train_data, test_data, data_info = load_data(config)
    if is_replicated(strategy):
        train_data = shard_input(train_data, data_info.files["train"],
                                 worker_position(strategy)[1])
    resumed = claim_run_dir(run_dir, composed)
    if resumed:
        finished = RunSummary.load(run_dir)
        completed = finished is not None and finished.steps >= config.steps
        if completed and os.path.isfile(os.path.join(run_dir, MODEL_FILE)):
            log.info("%s already completed %d steps; nothing to do", run_dir, finished.steps)
            return finished
        if completed:  # stopped after its last step's checkpoint, before the model's save
            log.info("%s completed %d steps but holds no %s: writing it from the newest "
                     "checkpoint", run_dir, finished.steps, MODEL_FILE)
        else:
            log.info("continuing the run in %s", run_dir)
    record_or_check_data(run_dir, data_info.files, resumed, write=is_chief(strategy))
    accept_hydra_record(run_dir)  # this launch's .hydra/ replaces the one of the last

    impl = choose_implementation(config, train_data)
    with strategy.scope():
        model = build_model(config.data.num_classes, impl, config.model, config.precision,
                            config.jit, MeshInputs.of(config.data))
        optimizer = build_optimizer(model, config.optimizer, config.precision, config.steps)
    loop = build_loop(config, model, optimizer, train_data, strategy, data_info.train_histogram)
    predict_step = make_predict_step(model, config.jit, test_data.element_spec[0])
    validation_data = (evaluation_dataset(config.data, data_info, "validation")
                       if "validation" in data_info.files else None)
    test_when = test_evaluations(config)
    log.info("test split: %s", TEST_SCHEDULE_LOG[test_when])
    # The meshes drawn in TensorBoard come from the split scored at every evaluation: the
    # summaries' "eval" (test) or "validation".
    shown = "eval" if test_when == "every" or validation_data is None else "validation"
    mesh_summaries = MeshSummaries(
        sample_meshes(data_info.files["test" if shown == "eval" else "validation"],
                      config.summaries.meshes, MeshInputs.of(config.data)), model)

    def run_eval(last: bool):
        # Called by the controller after it logged the step, so steps_done is this step.
        results = {}
        if validation_data is not None:
            results["validation"] = evaluate(predict_step, validation_data,
                                             config.data.num_classes, data_info.train_histogram)
        if test_when == "every" or (test_when == "final" and last):
            results["eval"] = evaluate(predict_step, test_data, config.data.num_classes,
                                       data_info.train_histogram)
        if shown in results:
            mesh_summaries.write(controller.logger.writer(shown), controller.logger.steps_done)
        return results

    # Only the chief writes summaries and checkpoints; other workers write theirs (needed
    # by the collective ops) to a scratch directory that is removed afterwards. Every
    # worker restores from the chief's checkpoints, which they must all read.
    chief = is_chief(strategy)
    output_dir = run_dir if chief else tempfile.mkdtemp(prefix="meshseg-worker-")
    checkpoints = (os.path.abspath(config.checkpoint.dir) if config.checkpoint.dir
                   else os.path.join(run_dir, CHECKPOINT_DIR))
    schedule = Schedule(config.steps, config.eval_every, config.checkpoint.every,
                        config.checkpoint.keep)
    # Every write from here on (event files, checkpoints, summary, model) that fails is one
    # line naming the path and the cause; the checkpoints written before it stay.
    with writing(run_dir, hint=RESUME_HINT):
        controller = Controller(output_dir, model, optimizer, schedule, run_eval,
                                checkpoint_dir=checkpoints if chief else None,
                                restore_dir=checkpoints, run_dir=run_dir if chief else None)
        check_same_start(strategy, controller.start_step, checkpoints)
        if controller.start_step:
            log.info("resuming from the checkpoint of step %d", controller.start_step)
        try:
            controller.train(loop)
        except BaseException as error:
            close_and_summarize(controller, run_dir, output_dir, config, error, impl,
                                strategy, data_info, start)
            raise
        summary = close_and_summarize(controller, run_dir, output_dir, config, None, impl,
                                      strategy, data_info, start)
        if not controller.logger.steps_logged:  # nothing left to train: the run's own results
            summary = RunSummary.load(run_dir) or summary
        # Written aside, then renamed: the workers of a job may share the run directory.
        write_atomically(os.path.join(run_dir, MODEL_FILE),
                         lambda path: model.save(path, include_optimizer=False), "the model",
                         "run the same command once there is space (it writes the model "
                         "from the last checkpoint)")
    barrier(strategy)
    log_results(run_dir, summary)
    return summary


def close_and_summarize(controller: Controller, run_dir: str, output_dir: str,
                        config: TrainConfig, stopped_by: Optional[BaseException], impl: str,
                        strategy: tf.distribute.Strategy, data_info: DataInfo,
                        start: float) -> RunSummary:
    """Closes the run's event files and writes its `summary.json` and HParams session once
    training has stopped (a worker's scratch `output_dir` is removed instead); returns the
    `RunSummary`. A run that stops before its first step leaves an earlier summary as it
    was.

    Args:
      stopped_by: the error that stopped training, or None when it trained to its end.

    Raises:
      OutputError: if they cannot be written after a run that trained to its end. After a
        run stopped by an error, that error stays the one raised, and this one is logged
        unless that error was itself a failed write (the same cause, said once).
    """
    try:
        with writing(run_dir, hint=RESUME_HINT):
            controller.logger.close()
            summary = summarize(controller, impl, strategy, data_info,
                                time.perf_counter() - start)
            if output_dir == run_dir and (controller.logger.steps_logged
                                          or RunSummary.load(run_dir) is None):
                summary.save(run_dir)
                log_hparams(run_dir, config, summary)
            elif output_dir != run_dir:
                shutil.rmtree(output_dir, ignore_errors=True)
    except OutputError as error:
        if stopped_by is None:
            raise
        if write_failure_cause(stopped_by) is None:
            log.error("%s", error)
        summary = summarize(controller, impl, strategy, data_info, time.perf_counter() - start)
    return summary


def summarize(controller: Controller, impl: str, strategy: tf.distribute.Strategy,
              data_info: DataInfo, wall_time_s: float) -> RunSummary:
    """The `RunSummary` of a run whose controller has stopped."""
    evaluation = controller.logger.last_eval
    return RunSummary(
        impl=impl, replicas=strategy.num_replicas_in_sync, test_files=data_info.files["test"],
        steps=controller.logger.steps_done, wall_time_s=round(wall_time_s, 2), pid=os.getpid(),
        **step_times(controller.logger.run_dir), peak_rss_mib=peak_rss_mib(),
        test_train_overlap=data_info.test_train_overlap,
        **{f"eval_{name}": value for name, value in evaluation.items()},
        **{f"validation_{name}": controller.logger.last_validation.get(name)
           for name in ("accuracy", "mean_iou")})


def log_results(run_dir: str, summary: RunSummary) -> None:
    """The run's closing summary in the console log: steps and times, test accuracy
    against the majority-class baseline, where the outputs are, and the TensorBoard
    command that shows them."""
    median = ("n/a (every step traced or compiled)" if summary.median_step_time_ms is None
              else f"{summary.median_step_time_ms:.1f} ms")
    log.info("%d steps: median step time %s, compile time %.1f s, wall time %.0f s",
             summary.steps, median, summary.compile_time_s, summary.wall_time_s)
    if summary.eval_accuracy is not None:
        log.info("test accuracy %.4f (majority-class baseline %.4f), mean IoU %.4f; accuracy "
                 "%.4f on label boundaries, %.4f elsewhere", summary.eval_accuracy,
                 summary.eval_majority_baseline_accuracy, summary.eval_mean_iou,
                 summary.eval_boundary_accuracy, summary.eval_interior_accuracy)
    if summary.validation_accuracy is not None:
        log.info("validation accuracy %.4f, mean IoU %.4f", summary.validation_accuracy,
                 summary.validation_mean_iou)
    log.info("run directory: %s", run_dir)
    log.info("outputs: %s, %s, %s/, train/ and eval/ event files", MODEL_FILE, SUMMARY_FILE,
             CHECKPOINT_DIR)
    relative = os.path.relpath(run_dir)
    log.info("curves and meshes: %s", shell_command([
        runnable_command("tensorboard"), "--logdir",
        run_dir if relative.startswith("..") else relative]))
