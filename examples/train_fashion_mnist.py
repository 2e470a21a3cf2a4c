#!/usr/bin/env python3
"""Fashion-MNIST with dp from Python, as PyTorch's quickstart tutorial trains
it: datasets, data loaders, a model, an optimizer, a train and a test
function, an epoch loop. The model is examples/fashion_mnist_mlp.json and
DataParallel runs it over every local device (one CPU device per core).

    examples/train_fashion_mnist.py [--epochs 5] [--batch-size 64] [--devices auto]
        [--model examples/fashion_mnist_mlp.json] [--data /usr/share/datasets/fashion-mnist]

The data are Debian's dataset-fashion-mnist (apt install dataset-fashion-mnist).
The last line is a JSON object, as `dp train` prints.
"""
import argparse
import json
import math
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
try:
    import dp
except ImportError:  # a source checkout: the package is in bindings/python
    sys.path.insert(0, os.path.join(here, '..', 'bindings', 'python'))
    import dp

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('--model', default=os.path.join(here, 'fashion_mnist_mlp.json'))
parser.add_argument('--data', default=dp.FASHION_MNIST_DIR)
parser.add_argument('--devices', default='auto')
parser.add_argument('--epochs', type=int, default=5)
parser.add_argument('--batch-size', type=int, default=64)
parser.add_argument('--lr', type=float, default=0.001)
parser.add_argument('--workers', type=int, default=2)
parser.add_argument('--save', help='checkpoint to write after each epoch')
args = parser.parse_args()

# Download... no: Debian ships the files. Normalised by the training set's mean and std.
training_data = dp.FashionMNIST(root=args.data, train=True)
test_data = dp.FashionMNIST(root=args.data, train=False)

# Create data loaders.
train_dataloader = dp.DataLoader(training_data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
test_dataloader = dp.DataLoader(test_data, batch_size=1000, num_workers=args.workers)

# The model: 784-256-128-10 with batch norm (the JSON file), on every device.
model = dp.DataParallel(dp.Model(args.model), args.devices)
print(f"Let's use {model.num_devices} devices!", file=sys.stderr)

# Cross-entropy is the model's loss ("loss" in its JSON); Adam with a cosine schedule.
optimizer = dp.Adam(model, lr=args.lr)
steps_per_epoch = len(train_dataloader)
total_steps = args.epochs * steps_per_epoch


def train(dataloader, model, optimizer, epoch):
    size = len(dataloader.dataset)
    model.train()
    seen, loss_sum, start = 0, 0.0, time.perf_counter()
    for batch, (X, y) in enumerate(dataloader):
        # torch.optim.lr_scheduler.CosineAnnealingLR over all steps, as `dp train --lr-schedule cosine`
        optimizer.lr = args.lr * 0.5 * (1 + math.cos(math.pi * (epoch * steps_per_epoch + batch) / total_steps))
        # Compute prediction error, backpropagate, step: zero_grad, forward, loss, backward, step
        loss = model.train_step(optimizer, X, y)
        seen += len(y)
        loss_sum += loss * len(y)
        if batch % 100 == 0:
            print(f"loss: {loss:>7f}  [{seen:>5d}/{size:>5d}]", file=sys.stderr)
    return loss_sum / seen, seen, time.perf_counter() - start


def test(dataloader, model):
    size = len(dataloader.dataset)
    model.eval()
    test_loss, correct = 0.0, 0
    for X, y in dataloader:
        loss, hits = model.evaluate(X, y)
        test_loss += loss * len(y)
        correct += hits
    test_loss /= size
    print(f"Test Error: \n Accuracy: {(100 * correct / size):>0.1f}%, Avg loss: {test_loss:>8f} \n", file=sys.stderr)
    return correct / size, test_loss


train_seconds, samples, start = 0.0, 0, time.perf_counter()
for t in range(args.epochs):
    print(f"Epoch {t + 1}\n-------------------------------", file=sys.stderr)
    train_loss, n, seconds = train(train_dataloader, model, optimizer, t)
    train_seconds += seconds
    samples += n
    accuracy, test_loss = test(test_dataloader, model)
    if args.save:
        dp.save_checkpoint(args.save, model, optimizer, train_dataloader, {'epoch': t + 1})
print("Done!", file=sys.stderr)
print(json.dumps({'test_accuracy': round(accuracy, 6), 'test_loss': round(test_loss, 6),
                  'train_loss': round(train_loss, 6), 'epochs': args.epochs,
                  'samples_per_second': round(samples / train_seconds, 1),
                  'seconds': round(time.perf_counter() - start, 3), 'devices': model.num_devices}))
