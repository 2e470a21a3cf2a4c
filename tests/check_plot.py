#!/usr/bin/env python3
"""`dp train --plot`: the chart's elements, as an SVG renderer lays them out.

    check_plot.py BUILD/src/cli/dp       train a few short runs on synthetic data, check their charts
    check_plot.py --svg FILE...          check existing charts (what holds for any run)
    check_plot.py --png OUT.png FILE     also: write FILE rendered (rsvg-convert) to OUT.png

CHECK_PLOT_KEEP=DIR keeps the runs' files (charts, logs) in DIR.

What is checked: the SVG's structure (ids and classes, src/cli/plot.h): axes
with tick marks on the frame, numeric tick labels on 1-2-5 steps that map
linearly onto their ticks, axis titles with units, the epoch axis agreeing
with the step axis, a legend naming each series drawn, the caption; for runs,
each epoch's markers where the --log file's values put them, and the
per-step line downsampled for long runs; with --eval-every, a hollow marker
per mid-epoch evaluation where the log puts it, smaller than the epochs',
and one line through the epoch ends and mid-epoch points in step order. Then librsvg (rsvg-convert, Debian:
librsvg2-bin) renders the chart, and every text's ink box, measured by
rendering it alone (rsvg-convert --export-id), must lie within the canvas and
clear of every other text, of the panels' frames, tick marks, grid lines,
data lines and markers.

Exit 77 (meson: skipped) when rsvg-convert is missing, once the checks that
need no renderer have passed.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

SVG_NS = 'http://www.w3.org/2000/svg'
RSVG = shutil.which('rsvg-convert')
passed = failed = 0


def expect(cond, what, detail=''):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f'FAILED: {what}' + (f'\n  {detail}' if detail else ''))
    return cond


def tag(e):
    return e.tag.split('}')[-1]


def classes(e):
    return (e.get('class') or '').split()


def by_id(root, id_):
    return next((e for e in root.iter() if e.get('id') == id_), None)


def by_class(root, cls, kind=None):
    return [e for e in root.iter() if cls in classes(e) and (kind is None or tag(e) == kind)]


def text_of(e):
    return ''.join(e.itertext())


def f(e, attr, default=0.0):
    v = e.get(attr)
    return default if v is None else float(v)


def canvas_size(root):
    return tuple(float((root.get(k) or '0').removesuffix('px')) for k in ('width', 'height'))


TICK_RE = re.compile(r'^(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)([kM]?)$')


def tick_value(s):
    m = TICK_RE.match(s.strip())
    if not m:
        return None
    return float(m.group(1)) * {'': 1, 'k': 1e3, 'M': 1e6}[m.group(2)]


def is_125(step):
    """1, 2 or 5 times a power of ten."""
    e = math.floor(math.log10(step))
    m = step / 10 ** e
    return any(abs(m - k) < 1e-6 for k in (1, 2, 5, 10))


def frame_of(root, panel_id):
    p = by_id(root, panel_id)
    if p is None:
        return None
    frames = [e for e in p.iter() if tag(e) == 'rect' and 'frame' in classes(e)]
    if len(frames) != 1:
        return None
    r = frames[0]
    return (f(r, 'x'), f(r, 'y'), f(r, 'x') + f(r, 'width'), f(r, 'y') + f(r, 'height'))


def check_axis(root, name, axis_id, orient, frame, edge, title, min_ticks):
    """Ticks on a frame's edge (outward), labels on 1-2-5 steps mapped linearly.
    Returns (values, positions, fit) with position = fit[0] + fit[1] * value."""
    g = by_id(root, axis_id)
    if not expect(g is not None, f'{name}: has an axis ({axis_id})'):
        return None
    ticks = [e for e in g.iter() if tag(e) == 'line' and 'tick' in classes(e)]
    labels = [e for e in g.iter() if tag(e) == 'text' and 'tick-label' in classes(e)]
    titles = [text_of(e) for e in g.iter() if tag(e) == 'text' and 'axis-title' in classes(e)]
    if title is not None:
        expect(titles == [title], f'{name}: {axis_id} is titled {title!r}', str(titles))
    expect(len(labels) >= min_ticks, f'{name}: {axis_id} has at least {min_ticks} tick labels', str(len(labels)))
    expect(len(ticks) == len(labels), f'{name}: {axis_id}: a tick mark per label', f'{len(ticks)} vs {len(labels)}')
    if frame is not None:
        for t in ticks:
            x1, y1, x2, y2 = f(t, 'x1'), f(t, 'y1'), f(t, 'x2'), f(t, 'y2')
            if orient == 'x':
                ok = abs(x1 - x2) < 1e-6 and min(abs(y1 - edge), abs(y2 - edge)) < 0.6 and abs(y1 - y2) >= 3
                inward = (max(y1, y2) > frame[1] + 0.6) and (min(y1, y2) < frame[3] - 0.6)
            else:
                ok = abs(y1 - y2) < 1e-6 and min(abs(x1 - edge), abs(x2 - edge)) < 0.6 and abs(x1 - x2) >= 3
                inward = (max(x1, x2) > frame[0] + 0.6) and (min(x1, x2) < frame[2] - 0.6)
            if not expect(ok and not inward, f'{name}: {axis_id}: tick marks stand out of the frame\'s edge',
                          ET.tostring(t, encoding='unicode')):
                break
    values = [tick_value(text_of(e)) for e in labels]
    if not expect(all(v is not None for v in values), f'{name}: {axis_id}: tick labels are numbers',
                  str([text_of(e) for e in labels])):
        return None
    if orient == 'x':
        pos = [f(e, 'x') for e in labels]
        tick_pos = sorted(f(t, 'x1') for t in ticks)
        for p in pos:
            if not expect(any(abs(p - q) < 0.06 for q in tick_pos), f'{name}: {axis_id}: each label centred on a tick', str(p)):
                break
        expect(all(e.get('text-anchor') == 'middle' for e in labels), f'{name}: {axis_id}: labels centred (text-anchor)')
    else:
        tick_pos = sorted((f(t, 'y1') for t in ticks), reverse=True)
        pos = tick_pos if len(tick_pos) == len(labels) else [f(e, 'y') for e in labels]
    order = sorted(range(len(values)), key=lambda i: pos[i] if orient == 'x' else -pos[i])
    values = [values[i] for i in order]
    pos = [pos[i] for i in order]
    if len(values) < 2:
        return values, pos, None
    diffs = [b - a for a, b in zip(values, values[1:])]
    ok = expect(all(d > 0 for d in diffs), f'{name}: {axis_id}: values increase along the axis', str(values))
    ok = ok and expect(all(abs(d - diffs[0]) <= 1e-6 * max(1.0, abs(diffs[0])) for d in diffs),
                       f'{name}: {axis_id}: evenly spaced values', str(values))
    ok = ok and expect(is_125(diffs[0]), f'{name}: {axis_id}: a 1-2-5 step', str(diffs[0]))
    if not ok:
        return values, pos, None
    # A least-squares line through (tick index, position): the ticks are evenly spaced in value.
    n, d = len(values), diffs[0]
    u = [(v - values[0]) / d for v in values]
    mu, mp = sum(u) / n, sum(pos) / n
    bu = sum((x - mu) * (p - mp) for x, p in zip(u, pos)) / sum((x - mu) ** 2 for x in u)
    au = mp - bu * mu
    resid = max(abs(au + bu * x - p) for x, p in zip(u, pos))
    expect(resid < 0.6, f'{name}: {axis_id}: ticks placed linearly', f'residual {resid:.2f} px')
    b = bu / d  # px per unit
    return values, pos, (au - b * values[0], b)


def markers(root, series):
    """Centres of a series' markers (circles, squares), in document order."""
    out = []
    for g in by_class(root, series, 'g'):
        for m in g.iter():
            if 'marker' not in classes(m):
                continue
            if tag(m) == 'circle':
                out.append((f(m, 'cx'), f(m, 'cy')))
            elif tag(m) == 'rect':
                out.append((f(m, 'x') + f(m, 'width') / 2, f(m, 'y') + f(m, 'height') / 2))
    return out


def points(e):
    return [tuple(map(float, p.split(','))) for p in (e.get('points') or '').split()]


def check_structure(name, root, run=None):
    """The chart's parts; `run`: what the run logged, to check values against."""
    expect(tag(root) == 'svg', f'{name}: an <svg> root')
    W, H = canvas_size(root)
    expect(root.get('viewBox') == f'0 0 {root.get("width")} {root.get("height")}', f'{name}: a viewBox of its size')
    t = by_id(root, 'title')
    expect(t is not None and text_of(t).strip() != '', f'{name}: a title')
    f1, f2 = frame_of(root, 'panel-loss'), frame_of(root, 'panel-accuracy')
    expect(f1 is not None, f'{name}: a loss panel with one frame')
    expect(f2 is not None, f'{name}: an accuracy panel with one frame')
    if f1 and f2:
        expect(f2[1] > f1[3] and abs(f1[0] - f2[0]) < 0.01 and abs(f1[2] - f2[2]) < 0.01,
               f'{name}: the panels stacked, aligned (one step axis)')
        expect(all(0 <= r[0] < r[2] <= W and 0 <= r[1] < r[3] <= H for r in (f1, f2)), f'{name}: panels within the canvas')
    nowhere = (0, 0, 0, 0)
    f1, f2 = f1 or nowhere, f2 or nowhere
    raw = by_class(root, 'loss-raw', 'polyline')
    epochs = run['epochs'] if run else None
    have_epochs = bool(markers(root, 'test-accuracy')) if run is None else bool(epochs)
    evals = run.get('evals', []) if run else None
    have_evals = bool(by_class(root, 'test-loss-mid', 'g')) if run is None else bool(evals)
    have_steps = bool(raw) if run is None else run['steps'] > 0

    step = check_axis(root, name, 'axis-step', 'x', f2, f2[3], 'step', 2)
    shared = by_id(root, 'axis-step-shared')
    if expect(shared is not None, f'{name}: the loss panel has the step ticks too') and step:
        xs = sorted(f(t, 'x1') for t in shared.iter() if tag(t) == 'line')
        expect(len(xs) == len(step[1]) and all(abs(a - b) < 0.06 for a, b in zip(xs, sorted(step[1]))),
               f'{name}: the loss panel\'s step ticks match the step axis')
    loss = check_axis(root, name, 'axis-loss', 'y', f1, f1[0], 'loss', 3 if have_steps or have_epochs else 0)
    acc = check_axis(root, name, 'axis-accuracy', 'y', f2, f2[0], 'test accuracy (%)',
                     3 if have_epochs or have_evals else 0)
    if acc and acc[0]:
        expect(0 <= acc[0][0] and acc[0][-1] <= 100, f'{name}: accuracy ticks within 0..100 %', str(acc[0]))
    spe = run['steps_per_epoch'] if run else None
    if by_id(root, 'axis-epoch') is not None or run:
        ep = check_axis(root, name, 'axis-epoch', 'x', f1, f1[1], 'epoch', 2)
        if ep and ep[2] and step and step[2]:
            # The epoch axis is the step axis in other units: steps = epochs * steps_per_epoch. Both put
            # 0 at the same px (extrapolated from ticks placed to 0.1 px: a tolerance growing with the distance).
            zero_e, zero_s = ep[2][0], step[2][0]
            expect(abs(zero_e - zero_s) < 1 + 1e-3 * max(abs(zero_e), abs(zero_s)), f'{name}: epoch 0 is step 0',
                   f'at {zero_e:.1f} and {zero_s:.1f} px')
            if spe:
                off = [f'epoch {v:g} at {p:.1f} px, step {v * spe:g} at {step[2][0] + step[2][1] * v * spe:.1f} px'
                       for v, p in zip(ep[0], ep[1]) if abs(step[2][0] + step[2][1] * v * spe - p) > 0.6]
                expect(not off, f'{name}: epoch ticks where the step axis has epoch x {spe} steps', '; '.join(off))

    # Legend: an entry for each series drawn.
    legend = by_id(root, 'legend')
    labels = [text_of(e) for e in legend.iter() if tag(e) == 'text'] if legend is not None else []
    series = [e.get('data-series') for e in by_class(root, 'legend-entry')] if legend is not None else []
    want = (['loss-raw', 'loss-smooth'] if have_steps else []) + \
           (['train-loss', 'test-loss'] if have_epochs else []) + (['test-loss-mid'] if have_evals else []) + \
           (['test-accuracy'] if have_epochs else []) + (['test-accuracy-mid'] if have_evals else [])
    expect(series == want, f'{name}: legend entries', f'{series} vs {want}')
    for s in series:
        expect(len(by_class(root, s)) >= 1, f'{name}: the legend\'s {s} is drawn')
    for word in (['per step', 'moving average'] if have_steps else []) + \
                (['train loss', 'test loss', 'test accuracy'] if have_epochs else []) + \
                (['test loss (mid-epoch)', 'test accuracy (mid-epoch)'] if have_evals else []):
        expect(any(word in label for label in labels), f'{name}: legend says {word!r}', str(labels))
    cap = by_id(root, 'caption')
    caption = ' '.join(text_of(e) for e in cap.iter() if tag(e) == 'text') if cap is not None else None
    expect(cap is not None, f'{name}: a caption')

    # Data inside the frames.
    for p in raw + by_class(root, 'loss-smooth', 'polyline'):
        pts = points(p)
        expect(all(f1[0] <= x <= f1[2] and f1[1] <= y <= f1[3] for x, y in pts), f'{name}: loss lines within the loss panel')
    if not have_epochs and not have_evals and by_id(root, 'panel-accuracy') is not None:
        notes = [e for e in by_id(root, 'panel-accuracy').iter() if 'note' in classes(e)]
        expect(len(notes) == 1, f'{name}: an empty accuracy panel says why')
    if have_evals:
        check_mid_series(name, root, f1, f2)
    if run is None:
        return

    # --- what the run logged ---
    if run.get('caption'):
        for part in run['caption']:
            expect(caption is not None and part in caption, f'{name}: the caption has {part!r}', str(caption))
    n = run['steps']
    if n:
        xs = [x for p in raw for x, _ in points(p)]
        if n <= f1[2] - f1[0] - 20:
            expect(len(set(xs)) == n, f'{name}: the raw line has every step when there are fewer than pixels',
                   f'{len(set(xs))} vs {n}')
        expect(len(xs) <= 2 * (f1[2] - f1[0]) + 2, f'{name}: the raw line has at most 2 points per px column', str(len(xs)))
        sm = [x for p in by_class(root, 'loss-smooth', 'polyline') for x, _ in points(p)]
        expect(0 < len(sm) <= (f1[2] - f1[0]) + 2, f'{name}: the moving average has at most a point per px column', str(len(sm)))
        if step and step[2] and xs:
            a, b = step[2]
            first, last = (min(xs) - a) / b, (max(xs) - a) / b
            expect(abs(first - run['first_step']) < 0.6 + 1 / abs(b) and abs(last - run['last_step']) < 0.6 + 1 / abs(b),
                   f'{name}: the raw line spans steps {run["first_step"]}..{run["last_step"]}', f'{first:.2f}..{last:.2f}')
            left = (f1[0] - a) / b  # the step at the frame's left edge
            expect(run['first_step'] - 1 - 12 / abs(b) <= left <= run['first_step'] - 1,
                   f'{name}: the step axis starts where the run did (step {run["first_step"] - 1})', f'{left:.2f}')
    for series, key, axis, scale in (('train-loss', 'train_loss', loss, 1), ('test-loss', 'test_loss', loss, 1),
                                     ('test-accuracy', 'test_accuracy', acc, 100)):
        ms = markers(root, series)
        if not expect(len(ms) == len(epochs), f'{name}: {series}: a marker per epoch', f'{len(ms)} vs {len(epochs)}'):
            continue
        for (mx, my), e in zip(ms, epochs):
            at = e.get('step', e['epoch'] * run['steps_per_epoch'])  # the step the epoch ended at
            if step and step[2]:
                s = (mx - step[2][0]) / step[2][1]
                expect(abs(s - at) < 0.6 / abs(step[2][1]) + 0.01, f'{name}: {series}: epoch {e["epoch"]} at its step',
                       f'{s:.2f} vs {at}')
            if axis and axis[2]:
                v = (my - axis[2][0]) / axis[2][1]
                expect(abs(v - e[key] * scale) < 0.6 / abs(axis[2][1]) + 1e-6 * scale,
                       f'{name}: {series}: epoch {e["epoch"]}\'s value', f'{v:.4f} vs {e[key] * scale:.4f}')
    # Mid-epoch evaluations: a hollow marker each (few here: none thinned out), at the logged step and value;
    # one line through them and the epoch ends, in step order.
    if not evals:
        expect(not by_class(root, 'test-loss-mid') and not by_class(root, 'test-accuracy-mid'),
               f'{name}: no mid-epoch series without --eval-every')
    for series, key, axis, scale in (('test-loss-mid', 'test_loss', loss, 1),
                                     ('test-accuracy-mid', 'test_accuracy', acc, 100)):
        if not evals:
            break
        ms = markers(root, series)
        if not expect(len(ms) == len(evals), f'{name}: {series}: a marker per mid-epoch evaluation',
                      f'{len(ms)} vs {len(evals)}'):
            continue
        for (mx, my), e in zip(ms, evals):
            if step and step[2]:
                s = (mx - step[2][0]) / step[2][1]
                expect(abs(s - e['step']) < 0.6 / abs(step[2][1]) + 0.01,
                       f'{name}: {series}: step {e["step"]}\'s marker at its step', f'{s:.2f} vs {e["step"]}')
            if axis and axis[2]:
                v = (my - axis[2][0]) / axis[2][1]
                expect(abs(v - e[key] * scale) < 0.6 / abs(axis[2][1]) + 1e-6 * scale,
                       f'{name}: {series}: step {e["step"]}\'s value', f'{v:.4f} vs {e[key] * scale:.4f}')
        line = [p for g in by_class(root, series, 'g') for e in g.iter() if tag(e) == 'polyline' for p in points(e)]
        want = sorted(ms + markers(root, series.removesuffix('-mid')))
        expect(len(line) == len(want) and
               all(abs(a[0] - b[0]) < 0.15 and abs(a[1] - b[1]) < 0.15 for a, b in zip(line, want)),
               f'{name}: {series}: the line joins every evaluation, epoch ends and mid-epoch, in step order',
               f'{line} vs {want}')


def marker_size(m):
    return 2 * f(m, 'r') if tag(m) == 'circle' else f(m, 'width')


def check_mid_series(name, root, f1, f2):
    """Mid-epoch evaluations (any chart that has them): hollow markers smaller
    than the epochs', inside their panel, on the one line that joins them and
    the epoch ends in step order."""
    for series, frame in (('test-loss-mid', f1), ('test-accuracy-mid', f2)):
        groups = by_class(root, series, 'g')
        epoch_groups = by_class(root, series.removesuffix('-mid'), 'g')
        if not expect(len(groups) == 1, f'{name}: one {series} group', str(len(groups))):
            continue
        g = groups[0]
        expect(g.get('fill') == '#ffffff', f'{name}: {series}: hollow markers (white fill)', str(g.get('fill')))
        ms = [m for m in g.iter() if 'marker' in classes(m)]
        expect(ms, f'{name}: {series}: has markers')
        mid_sizes = [marker_size(m) for m in ms]
        epoch_sizes = [marker_size(m) for eg in epoch_groups for m in eg.iter() if 'marker' in classes(m)]
        if epoch_sizes and mid_sizes:
            expect(max(mid_sizes) <= min(epoch_sizes), f'{name}: {series}: markers no larger than the epochs\'',
                   f'{max(mid_sizes)} vs {min(epoch_sizes)}')
        centres = markers(root, series)
        expect(all(frame[0] <= x <= frame[2] and frame[1] <= y <= frame[3] for x, y in centres),
               f'{name}: {series}: markers within their panel')
        lines = [e for e in g.iter() if tag(e) == 'polyline']
        others = [e for eg in epoch_groups for e in eg.iter() if tag(e) == 'polyline']
        expect(len(lines) <= 1 and not others,
               f'{name}: {series}: one line (in the -mid group), none in the epochs\' group', f'{len(lines)} and {len(others)}')
        pts = points(lines[0]) if lines else []
        expect(all(b[0] >= a[0] for a, b in zip(pts, pts[1:])), f'{name}: {series}: the line goes in step order')
        everything = centres + markers(root, series.removesuffix('-mid'))
        off = [c for c in everything if not any(abs(c[0] - p[0]) < 0.15 and abs(c[1] - p[1]) < 0.15 for p in pts)]
        expect(len(everything) < 2 or not off, f'{name}: {series}: every marker on the line', str(off[:5]))


# --- rendering ---

def png_size(data):
    if data[:8] != b'\x89PNG\r\n\x1a\n' or data[12:16] != b'IHDR':
        return None
    return struct.unpack('>II', data[16:24])


def rsvg(args, timeout=60):
    r = subprocess.run([RSVG, *args], capture_output=True, timeout=timeout)
    return r.stdout if r.returncode == 0 else None


def ink_boxes(root, tmp):
    """Each <text>'s ink box (x0, y0, x1, y1) as librsvg renders it, None if
    it renders nothing; and whether each lies within the canvas. Two renders
    per text, each of the text and a speck at one corner of the canvas
    (--export-id renders an element alone, cropped to its ink): one gives the
    right and bottom edges, the other the left and top; a text out of the
    canvas shows as a box out of it (the speck cannot hide that)."""
    W, H = canvas_size(root)
    probe = ET.fromstring(ET.tostring(root))
    parents = {c: p for p in probe.iter() for c in p}
    texts = [e for e in probe.iter() if tag(e) == 'text']
    for e in probe.iter():
        if tag(e) == 'g' and e.get('transform'):
            expect(False, 'texts\' groups carry no transform (the probe places its specks in the canvas\'s coordinates)')
            return None
    # Drawing that is not text goes: only the texts' layout matters, and less to parse is faster.
    for e in list(probe.iter()):
        for c in list(e):
            if tag(c) in ('line', 'polyline', 'polygon', 'path', 'circle', 'ellipse', 'rect', 'image', 'use'):
                e.remove(c)
    ids = []
    for i, t in enumerate(texts):
        parent = parents[t]
        at = list(parent).index(t)
        parent.remove(t)
        t.attrib.pop('id', None)
        for corner, (x, y) in (('a', (0, 0)), ('b', (W - 0.5, H - 0.5))):
            g = ET.Element(f'{{{SVG_NS}}}g', {'id': f'probe-{i}-{corner}'})
            ET.SubElement(g, f'{{{SVG_NS}}}rect', {'x': str(x), 'y': str(y), 'width': '0.5', 'height': '0.5',
                                                   'fill': '#000', 'fill-opacity': '0.02', 'stroke': 'none'})
            g.append(ET.fromstring(ET.tostring(t)))
            parent.insert(at, g)
            at += 1
            ids.append(g.get('id'))
    path = os.path.join(tmp, 'probe.svg')
    ET.ElementTree(probe).write(path, encoding='utf-8', xml_declaration=False)

    def size(id_):
        data = rsvg(['-i', id_, path])
        return png_size(data) if data else None

    with ThreadPoolExecutor(max_workers=2) as pool:
        sizes = dict(zip(ids, pool.map(size, ids)))
    boxes = []
    for i in range(len(texts)):
        a, b = sizes[f'probe-{i}-a'], sizes[f'probe-{i}-b']
        if a is None or b is None:
            boxes.append(None)
            continue
        # a: from (0, 0) to the text's right and bottom; b: from its left and top to (W, H).
        boxes.append((W - b[0], H - b[1], float(a[0]), float(a[1])))
    return boxes


def overlap(p, q):
    return min(p[2], q[2]) - max(p[0], q[0]) > 0 and min(p[3], q[3]) - max(p[1], q[1]) > 0


def segment_hits_box(x1, y1, x2, y2, box):
    """Whether the segment passes through the box's interior (Liang-Barsky)."""
    t0, t1 = 0.0, 1.0
    dx, dy = x2 - x1, y2 - y1
    for p, q in ((-dx, x1 - box[0]), (dx, box[2] - x1), (-dy, y1 - box[1]), (dy, box[3] - y1)):
        if p == 0:
            if q <= 0:
                return False
        else:
            r = q / p
            if p < 0:
                t0 = max(t0, r)
            else:
                t1 = min(t1, r)
    return t0 < t1


def shapes(root):
    """Non-text drawing, in canvas coordinates: frames (unfilled rects), line
    segments (lines, polylines), filled boxes (markers: circles, rects)."""
    W, H = canvas_size(root)
    frames, segments, boxes = [], [], []
    for e in root.iter():
        k = tag(e)
        if k == 'rect':
            w, h = e.get('width', '0'), e.get('height', '0')
            if w.endswith('%') or h.endswith('%') or (float(w) >= W and float(h) >= H):
                continue  # the background
            r = (f(e, 'x'), f(e, 'y'), f(e, 'x') + float(w), f(e, 'y') + float(h))
            (frames if e.get('fill') == 'none' else boxes).append((r, e))
        elif k == 'line':
            segments.append(((f(e, 'x1'), f(e, 'y1'), f(e, 'x2'), f(e, 'y2')), e))
        elif k == 'polyline':
            pts = points(e)
            segments += [((a[0], a[1], b[0], b[1]), e) for a, b in zip(pts, pts[1:])]
        elif k == 'circle':
            cx, cy, r = f(e, 'cx'), f(e, 'cy'), f(e, 'r')
            boxes.append(((cx - r, cy - r, cx + r, cy + r), e))
    return frames, segments, boxes


def check_render(name, path, root, png_out=None):
    W, H = canvas_size(root)
    data = rsvg([path])
    expect(data is not None and png_size(data) == (round(W), round(H)), f'{name}: librsvg renders it, {W:g} x {H:g} px',
           str(png_size(data) if data else 'rsvg-convert failed'))
    if png_out and data:
        with open(png_out, 'wb') as fh:
            fh.write(data)
    texts = [e for e in root.iter() if tag(e) == 'text']
    with tempfile.TemporaryDirectory() as tmp:
        boxes = ink_boxes(root, tmp)
    if boxes is None:
        return
    def who(e):
        return f'{text_of(e)!r} ({e.get("class") or e.get("id") or "text"})'
    placed, unrendered, outside = [], [], []
    for e, b in zip(texts, boxes):
        if not text_of(e).strip():
            continue
        if b is None:
            unrendered.append(who(e))
            continue
        if not (b[0] >= 0 and b[1] >= 0 and b[2] <= W and b[3] <= H):
            outside.append(f'{who(e)}: ink {b}')
        placed.append((e, b))
    expect(not unrendered, f'{name}: every text renders', '; '.join(unrendered))
    expect(not outside, f'{name}: every text within the {W:g} x {H:g} canvas', '\n  '.join(outside))
    pairs = [f'{who(e)} {b} and {who(e2)} {b2}' for i, (e, b) in enumerate(placed) for e2, b2 in placed[i + 1:]
             if overlap(b, b2)]
    expect(not pairs, f'{name}: no two texts overlap ({len(placed)} texts)', '\n  '.join(pairs))
    frames, segments, filled = shapes(root)
    on_frame, on_line, on_marker = [], [], []
    for e, b in placed:
        for r, fe in frames:
            inside = b[0] > r[0] and b[1] > r[1] and b[2] < r[2] and b[3] < r[3]
            if not inside and overlap(b, r):
                on_frame.append(f'{who(e)}: ink {b}, frame {r}')
        for (x1, y1, x2, y2), se in segments:
            if segment_hits_box(x1, y1, x2, y2, b):
                on_line.append(f'{who(e)}: ink {b}, {tag(se)} {se.get("class") or ""} ({x1:g},{y1:g})-({x2:g},{y2:g})')
                break
        for r, se in filled:
            if overlap(b, r):
                on_marker.append(f'{who(e)}: ink {b}, {tag(se)} at {r}')
    expect(frames, f'{name}: has frames (unfilled rects)')
    expect(not on_frame, f'{name}: no text crosses a frame', '\n  '.join(on_frame))
    expect(not on_line, f'{name}: no text on a line (ticks, grid, data, legend samples; {len(segments)} segments)',
           '\n  '.join(on_line))
    expect(not on_marker, f'{name}: no text under a marker', '\n  '.join(on_marker))
    # Placement, in the rendered boxes: titles beside their axes, labels on their ticks.
    box = {id(e): b for e, b in placed}
    def group_texts(gid, cls):
        g = by_id(root, gid)
        return [e for e in g.iter() if tag(e) == 'text' and cls in classes(e) and id(e) in box] if g is not None else []
    f1, f2 = frame_of(root, 'panel-loss'), frame_of(root, 'panel-accuracy')
    if f1 is None or f2 is None:
        return
    for gid, frame, side in (('axis-step', f2, 'below'), ('axis-epoch', f1, 'above'),
                             ('axis-loss', f1, 'left'), ('axis-accuracy', f2, 'left')):
        labels, titles = group_texts(gid, 'tick-label'), group_texts(gid, 'axis-title')
        for t in titles:
            tb = box[id(t)]
            for l in labels:
                lb = box[id(l)]
                ok = {'below': tb[1] >= lb[3], 'above': tb[3] <= lb[1], 'left': tb[2] <= lb[0]}[side]
                if not expect(ok, f'{name}: {gid}: its title {side} its tick labels', f'{tb} vs {lb}'):
                    break
            if side == 'left':
                expect(tb[3] - tb[1] > tb[2] - tb[0], f'{name}: {gid}: its title reads upwards (rotated)')
                mid = (frame[1] + frame[3]) / 2
                expect(abs((tb[1] + tb[3]) / 2 - mid) < 3, f'{name}: {gid}: its title centred on its panel')
        for l in labels:
            lb = box[id(l)]
            if side in ('below', 'above'):
                expect(abs((lb[0] + lb[2]) / 2 - f(l, 'x')) < 2, f'{name}: {gid}: label {text_of(l)} centred on its tick',
                       f'{lb} vs x {f(l, "x")}')
            else:
                ty = [f(t, 'y1') for t in by_id(root, gid).iter() if 'tick' in classes(t)]
                expect(any(abs((lb[1] + lb[3]) / 2 - y) < 2 for y in ty) and lb[2] < frame[0],
                       f'{name}: {gid}: label {text_of(l)} level with its tick, left of the frame', str(lb))


def check_file(path, run=None, render=True, png_out=None):
    name = os.path.basename(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        expect(False, f'{name}: well-formed XML', str(e))
        return None
    check_structure(name, root, run)
    if render and RSVG:
        check_render(name, path, root, png_out)
    return root


# --- runs ---

MLP = {"seed": 3, "input": {"shape": [8]},
       "layers": [{"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "linear", "out_features": 4}],
       "loss": {"type": "cross_entropy"}}


def without_history(src, dst):
    """A copy of a checkpoint without __metadata__'s "history" and "header_crc32" (as dp wrote them before
    keeping either)."""
    with open(src, 'rb') as fh:
        blob = fh.read()
    n = int.from_bytes(blob[:8], 'little')
    header = json.loads(blob[8:8 + n])
    del header['__metadata__']['history']
    header['__metadata__'].pop('header_crc32', None)  # nor its checksum, which covers the history
    head = json.dumps(header).encode()
    head += b' ' * (-len(head) % 8)
    with open(dst, 'wb') as fh:
        fh.write(len(head).to_bytes(8, 'little') + head + blob[8 + n:])


def run_cli(dp, tmp):
    def train(*args):
        r = subprocess.run([dp, 'train', *args], capture_output=True, text=True, timeout=300, cwd=tmp)
        return expect(r.returncode == 0, f'dp train {" ".join(args)} exits 0', r.stderr[-2000:])

    def log(path):
        with open(os.path.join(tmp, path)) as fh:
            return [json.loads(line) for line in fh if '"train_loss"' in line]

    def evals_of(path):  # the mid-epoch evaluations: test loss and accuracy, no train loss
        with open(os.path.join(tmp, path)) as fh:
            return [json.loads(line) for line in fh if '"test_loss"' in line and '"train_loss"' not in line]

    model = 'm&<x>.json'  # the caption names it: escaped in the SVG, read back intact
    with open(os.path.join(tmp, model), 'w') as fh:
        json.dump(MLP, fh)
    common = ['--data', 'synthetic:2048', '--batch-size', '64', '--devices', 'cpu:0,cpu:1', '--workers', '1',
              '--optimizer', '{"type": "adam", "lr": 0.01}']
    spe = 2048 // 64
    cases = []
    # Three epochs from the start.
    if train(model, *common, '--epochs', '3', '--log', 'full.jsonl', '--plot', 'full.svg'):
        cases.append(('full.svg', dict(epochs=log('full.jsonl'), steps=3 * spe, first_step=1, last_step=3 * spe,
                                       steps_per_epoch=spe, caption=[model, 'batch 64', '3 epochs']), True))
    # Three epochs with an evaluation every 6 steps (none at an epoch's end: step 96 is logged as epoch 3).
    if train(model, *common, '--epochs', '3', '--eval-every', '6', '--log', 'evals.jsonl', '--plot', 'evals.svg'):
        mid = evals_of('evals.jsonl')
        expect(len(mid) == 15, 'dp train --eval-every 6 logs 15 mid-epoch evaluations in 96 steps', str(len(mid)))
        cases.append(('evals.svg', dict(epochs=log('evals.jsonl'), evals=mid, steps=3 * spe, first_step=1,
                                        last_step=3 * spe, steps_per_epoch=spe, caption=[model]), True))
    # One epoch; then resumed from it to three: the chart shows the whole run (the checkpoint keeps
    # its history), or from step 33 on when the checkpoint has none (one written before dp kept it).
    if train(model, *common, '--epochs', '1', '--log', 'one.jsonl', '--plot', 'one.svg', '--save', 'one.ckpt'):
        cases.append(('one.svg', dict(epochs=log('one.jsonl'), steps=spe, first_step=1, last_step=spe,
                                      steps_per_epoch=spe, caption=[model]), False))
        if train(model, *common, '--epochs', '3', '--resume', 'one.ckpt', '--log', 'resumed.jsonl', '--plot', 'resumed.svg'):
            cases.append(('resumed.svg', dict(epochs=log('one.jsonl') + log('resumed.jsonl'), steps=3 * spe, first_step=1,
                                              last_step=3 * spe, steps_per_epoch=spe, caption=[model, 'resumed at step 32']),
                          True))
        without_history(os.path.join(tmp, 'one.ckpt'), os.path.join(tmp, 'old.ckpt'))
        if train(model, *common, '--epochs', '3', '--resume', 'old.ckpt', '--log', 'old.jsonl', '--plot', 'old.svg'):
            cases.append(('old.svg', dict(epochs=log('old.jsonl'), steps=2 * spe, first_step=spe + 1,
                                          last_step=3 * spe, steps_per_epoch=spe, caption=[model]), False))
    # Stopped before an epoch ended: no epoch, no accuracy. Twice: the same bytes.
    if (train(model, *common, '--epochs', '3', '--max-steps', '5', '--plot', 'zero.svg') &
            train(model, *common, '--epochs', '3', '--max-steps', '5', '--plot', 'zero2.svg')):
        cases.append(('zero.svg', dict(epochs=[], steps=5, first_step=1, last_step=5, steps_per_epoch=spe,
                                       caption=[model]), True))
        with open(os.path.join(tmp, 'zero.svg'), 'rb') as a, open(os.path.join(tmp, 'zero2.svg'), 'rb') as b:
            expect(a.read() == b.read(), 'the same run gives the same chart, byte for byte')
    # 20000 steps: the lines are downsampled, the file stays small.
    long_args = ['--data', 'synthetic:40000', '--batch-size', '2', '--devices', 'cpu:0', '--workers', '0',
                 '--optimizer', '{"type": "sgd", "lr": 0.02}', '--epochs', '1']
    if train(model, *long_args, '--log', 'long.jsonl', '--plot', 'long.svg'):
        cases.append(('long.svg', dict(epochs=log('long.jsonl'), steps=20000, first_step=1, last_step=20000,
                                       steps_per_epoch=20000, caption=[model]), True))
        size = os.path.getsize(os.path.join(tmp, 'long.svg'))
        expect(size < 100_000, 'a chart of 20000 steps stays under 100 kB', f'{size} bytes')
    # An unwritable --plot: exit 2, naming the path.
    r = subprocess.run([dp, 'train', model, *common, '--max-steps', '1', '--plot', 'no/such/dir/c.svg'],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    expect(r.returncode == 2 and 'no/such/dir/c.svg' in r.stderr, 'an unwritable --plot exits 2 naming it', r.stderr[-500:])
    for path, run, render in cases:
        check_file(os.path.join(tmp, path), run, render)


def main(argv):
    png_out = None
    if len(argv) >= 3 and argv[1] == '--png':
        png_out = argv[2]
        argv = [argv[0], '--svg'] + argv[3:]
    if len(argv) >= 3 and argv[1] == '--svg':
        for i, path in enumerate(argv[2:]):
            check_file(path, None, True, png_out if i == 0 else None)
    elif len(argv) == 2:
        keep = os.environ.get('CHECK_PLOT_KEEP')  # a folder to leave the runs' files (charts, logs) in
        if keep:
            os.makedirs(keep, exist_ok=True)
            run_cli(os.path.abspath(argv[1]), os.path.abspath(keep))
        else:
            with tempfile.TemporaryDirectory() as tmp:
                run_cli(os.path.abspath(argv[1]), tmp)
    else:
        print(__doc__)
        return 2
    print(f'{passed} passed, {failed} failed' + ('' if RSVG else ' (rsvg-convert not found: rendering not checked)'))
    if failed:
        return 1
    if not RSVG:
        print('SKIP: install rsvg-convert (Debian: librsvg2-bin) to check the rendered chart')
        return 77
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
