"""ParameterServerStrategy training, its cluster learnt from TF_CONFIG alone.

The ps and worker tasks start a TensorFlow server and serve until they are
stopped (the job ends when its chief does). The chief is the coordinator: it
trains a small Keras model on synthetic data for TRAIN_STEPS steps, printing
step and loss, and checkpoints to CHECKPOINT_DIR (shared by the job's
processes; a restarted chief resumes from the latest checkpoint). An
evaluator, if the job has one, is a sidecar: it runs no server and is in no
training task's cluster; it evaluates each checkpoint the chief writes on
held-out data, printing step and loss, and ends after the last.

Environment: TF_CONFIG (set by the controller), CHECKPOINT_DIR, TRAIN_STEPS
(default 60). Nothing is downloaded.
"""

import json
import logging
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf  # noqa: E402

STEPS = int(os.environ.get("TRAIN_STEPS", "60"))
PRINT_EVERY = 10
CHECKPOINT_EVERY = 10
BATCH = 32


def describe(resolver):
    config = json.loads(os.environ["TF_CONFIG"])
    me = f"{resolver.task_type}-{resolver.task_id}"
    print(f"{me}: TF_CONFIG cluster {json.dumps(config['cluster'], sort_keys=True)}", flush=True)
    return me


def serve(resolver, me):
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"{me}: serving at {server.target}", flush=True)
    server.join()


def examples(seed):
    # Synthetic regression data: y = x . w + 1, w fixed; seed 0 trains,
    # seed 1 is held out for the evaluator.
    x = tf.random.stateless_normal((1024, 8), seed=[7, seed])
    y = tf.reduce_sum(x * tf.range(1.0, 9.0) / 8.0, axis=1, keepdims=True) + 1.0
    return x, y


def dataset_fn():
    return tf.data.Dataset.from_tensor_slices(examples(0)).repeat().batch(BATCH)


def build_model():
    return tf.keras.Sequential(
        [tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)]
    )


def log_worker_returns():
    # ClusterCoordinator logs a worker's failure as an error, but its return
    # ("Worker ... has been recovered.": the worker answers again at its
    # address, restarted in place or moved to another cluster, and takes
    # closures again) at INFO, among routine INFO lines (one per join, more
    # as it stops). Let that line alone through, so the chief's log shows
    # both ends of a worker's absence.
    logger = tf.get_logger()
    logger.setLevel(logging.INFO)
    logger.addFilter(lambda record: record.levelno >= logging.WARNING or "has been recovered" in record.getMessage())


def coordinate(resolver, me):
    log_worker_returns()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        step = tf.Variable(0, dtype=tf.int64, name="step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    directory = os.environ["CHECKPOINT_DIR"]
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        print(f"{me}: resumed from {manager.latest_checkpoint} at step {int(step.numpy())}", flush=True)
    else:
        print(f"{me}: no checkpoint in {directory}: starting at step 0", flush=True)

    per_worker = coordinator.create_per_worker_dataset(dataset_fn)
    iterator = iter(per_worker)

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            step.assign_add(1)
            return loss

        return strategy.run(replica_fn, args=(next(iterator),))

    while int(step.numpy()) < STEPS:
        start = int(step.numpy())
        chunk = min(PRINT_EVERY, STEPS - start)
        losses = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(chunk)]
        coordinator.join()
        loss = float(losses[-1].fetch())
        done = int(step.numpy())
        print(f"{me}: step {done}/{STEPS} loss {loss:.4f}", flush=True)
        if done % CHECKPOINT_EVERY == 0 or done >= STEPS:
            manager.save(checkpoint_number=done)
    print(f"{me}: trained {STEPS} steps; checkpoint {manager.latest_checkpoint}", flush=True)


def evaluate(me):
    model = build_model()
    checkpoint = tf.train.Checkpoint(model=model)
    directory = os.environ["CHECKPOINT_DIR"]
    x, y = examples(1)
    evaluated = None
    print(f"{me}: evaluating the checkpoints in {directory}", flush=True)
    while True:
        latest = tf.train.latest_checkpoint(directory)
        if latest and latest != evaluated:
            checkpoint.restore(latest).expect_partial()
            loss = float(tf.reduce_mean(tf.square(model(x) - y)))
            step = int(latest.rsplit("-", 1)[1])
            print(f"{me}: evaluated {os.path.basename(latest)} at step {step}: loss {loss:.4f}", flush=True)
            evaluated = latest
            if step >= STEPS:
                return
        time.sleep(0.5)


def main():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    me = describe(resolver)
    if resolver.task_type in ("ps", "worker"):
        serve(resolver, me)
    elif resolver.task_type == "chief":
        coordinate(resolver, me)
    elif resolver.task_type == "evaluator":
        evaluate(me)
    else:
        raise SystemExit(f"{me}: no part for task type {resolver.task_type!r} in ParameterServerStrategy training")


if __name__ == "__main__":
    main()
