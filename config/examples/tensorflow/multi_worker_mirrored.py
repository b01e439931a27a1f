"""MultiWorkerMirroredStrategy training, its cluster learnt from TF_CONFIG alone.

Every worker runs this program: the workers reduce their gradients together
(collective ops over the addresses in TF_CONFIG), train a small Keras model on
synthetic data for TRAIN_STEPS steps, print step and loss, and checkpoint to
CHECKPOINT_DIR (shared by the job's processes; worker 0 writes the
checkpoint, the others a copy of their own beside it that is removed, as
MultiWorkerMirroredStrategy wants). A restarted worker resumes from the
latest checkpoint; when a peer dies, the survivors restart in place and
resume from it too, with the peer the controller restarts.

Environment: TF_CONFIG (set by the controller), CHECKPOINT_DIR, TRAIN_STEPS
(default 40). Nothing is downloaded.
"""

import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf  # noqa: E402

STEPS = int(os.environ.get("TRAIN_STEPS", "40"))
PRINT_EVERY = 10
BATCH_PER_WORKER = 32


# A peer that died aborts the collectives of the others; TensorFlow must be
# restarted to reset them ("Restart your program to reset"). A survivor
# does so in place, up to this many times (its container does not fail:
# only the replica that died is restarted, by the controller), and resumes
# from the latest checkpoint with the restarted peer.
RESTARTS_IN_PLACE = 3


def restart_in_place(me, error):
    done = int(os.environ.get("TFJOB_EXAMPLE_RESTARTS", "0"))
    if done >= RESTARTS_IN_PLACE:
        raise error
    print(f"{me}: a peer failed ({type(error).__name__}); restarting in place to resume from the latest checkpoint", flush=True)
    os.environ["TFJOB_EXAMPLE_RESTARTS"] = str(done + 1)
    os.execv(sys.executable, [sys.executable] + sys.argv)


def main():
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    me = f"{task['type']}-{task['index']}"
    print(f"{me}: TF_CONFIG cluster {json.dumps(config['cluster'], sort_keys=True)}", flush=True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    print(f"{me}: {workers} replicas in sync", flush=True)

    x = tf.random.stateless_normal((1024, 8), seed=[11, 0])
    y = tf.reduce_sum(x * tf.range(1.0, 9.0) / 8.0, axis=1, keepdims=True) + 1.0
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH_PER_WORKER * workers)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        step = tf.Variable(0, dtype=tf.int64, name="step")

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    root = os.environ["CHECKPOINT_DIR"]
    # Worker 0 (the chief of a chief-less cluster) owns the checkpoint; the
    # others must save too (the save is collective) but somewhere of their own.
    is_chief = task["index"] == 0
    directory = root if is_chief else os.path.join(root, f"tmp-{me}")
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
    latest = tf.train.latest_checkpoint(root)
    if latest:
        checkpoint.restore(latest)
        print(f"{me}: resumed from {latest} at step {int(step.numpy())}", flush=True)
    else:
        print(f"{me}: no checkpoint in {root}: starting at step 0", flush=True)

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                per_example = tf.square(model(x, training=True) - y)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH_PER_WORKER * workers)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        step.assign_add(1)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    while int(step.numpy()) < STEPS:
        try:
            loss = float(train_step(iterator))
            done = int(step.numpy())
            if done % PRINT_EVERY == 0 or done >= STEPS:
                print(f"{me}: step {done}/{STEPS} loss {loss:.4f}", flush=True)
                manager.save(checkpoint_number=done)
                if not is_chief:
                    shutil.rmtree(directory, ignore_errors=True)
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError, tf.errors.InternalError) as error:
            restart_in_place(me, error)
    print(f"{me}: trained {STEPS} steps", flush=True)


if __name__ == "__main__":
    main()
