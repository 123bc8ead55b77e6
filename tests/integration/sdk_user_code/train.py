"""A training script as a SageMaker TensorFlow user writes it: nothing in it knows this platform.

Hyperparameters arrive as command-line arguments, data in SM_CHANNEL_TRAINING, and the model goes
to SM_MODEL_DIR. The TensorFlow estimator also passes --model_dir (an S3 path, used by TF 1.x
style scripts); like most scripts, this one accepts it and saves to SM_MODEL_DIR instead.
"""

import argparse
import glob
import json
import os

import numpy as np
import tensorflow as tf


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--model_dir", type=str)
    parser.add_argument("--sm-model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
    parser.add_argument("--train", type=str, default=os.environ.get("SM_CHANNEL_TRAINING"))
    args, _ = parser.parse_known_args()
    return args


def load(directory):
    rows = [np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2) for path in sorted(glob.glob(os.path.join(directory, "*.csv")))]
    data = np.concatenate(rows).astype("float32")
    return data[:, :-1], data[:, -1].astype("int32")


def main():
    args = parse_args()
    x, y = load(args.train)
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(x.shape[1],)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2, activation="softmax")]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(args.learning_rate), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    model.save(os.path.join(args.sm_model_dir, "model.keras"))
    summary = {"script": "sdk_user_code/train.py", "epochs": args.epochs, "batch_size": args.batch_size, "examples": int(len(x)),
               "learning_rate": args.learning_rate, "loss": float(history.history["loss"][-1])}
    with open(os.path.join(args.sm_model_dir, "summary.json"), "w") as handle:
        json.dump(summary, handle)


if __name__ == "__main__":
    main()
