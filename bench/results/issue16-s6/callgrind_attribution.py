# Attribute callgrind Ir (--dump-instr=yes) to the innermost kernels/ function of each
# instruction's inline chain (addr2line -i), then to a category.
import subprocess, sys, re, collections
out, binary = sys.argv[1], sys.argv[2]
costs = collections.Counter()
addr = 0; line = 0; skip = False
def parse(tok, prev):
    if tok == '*': return prev
    if tok[0] in '+-': return prev + int(tok, 0)
    return int(tok, 0)
for raw in open(out):
    raw = raw.strip()
    if not raw or raw[0].isalpha() and '=' in raw.split()[0]:
        if raw.startswith('calls='): skip = True
        continue
    if not (raw[0].isdigit() or raw[0] in '+-*'): continue
    parts = raw.split()
    if len(parts) < 3: continue
    addr = parse(parts[0], addr); line = parse(parts[1], line)
    if skip: skip = False; continue
    costs[addr] += int(parts[2])
addrs = sorted(costs)
res = subprocess.run(['addr2line', '-i', '-f', '-C', '-e', binary] + ['0x%x' % a for a in addrs],
                     capture_output=True, text=True).stdout
# addr2line -i output: per address, pairs (function, file:line) for each inline level; separate by
# running addresses one by one is slow, so use -a to delimit.
res = subprocess.run(['addr2line', '-a', '-i', '-f', '-C', '-e', binary] + ['0x%x' % a for a in addrs],
                     capture_output=True, text=True).stdout.splitlines()
chains = {}; cur = None
i = 0
while i < len(res):
    l = res[i]
    if l.startswith('0x'):
        cur = int(l, 16); chains[cur] = []; i += 1; continue
    fn = l; loc = res[i + 1] if i + 1 < len(res) else ''
    chains[cur].append((fn, loc)); i += 2
cat = collections.Counter(); fns = collections.Counter()
rules = [('score (Q·Kᵀ micro-kernel)', r'ScoreTile|ScoreRows|NarrowScore'),
         ('mix (P·V micro-kernel)', r'MixTile|MixColumns|NarrowMix'),
         ('NaN/Inf scan of V', r'HasNonFinite|NonFiniteV'),
         ('exp', r'ExpNonPositive|ExpTile'),
         ('max / rescale / online softmax', r'TileMax|OnlineSoftmax|FullSoftmax|Rescale|NarrowSoftmaxRow|ExpBase|MarkHidden'),
         ('finish (normalise, store O, lse)', r'Finish|StoreNarrowed'),
         ('pack / transpose Q, widen K/V', r'PackQuery|WidenRows|Transpose'),
         ('mask / causal limits', r'Mask|Causal')]
total = sum(costs.values())
for a, c in costs.items():
    ch = chains.get(a, [])
    label = None
    for fn, loc in ch:   # innermost first
        for name, rx in rules:
            if re.search(rx, fn.split('(')[0]):
                label = name; break
        if label: break
    if label is None:
        label = 'other (loops, scratch, dispatch)'
        inner = next((fn for fn, loc in ch if '/work/main/' in loc), ch[0][0] if ch else '?')
        fns[inner.split('(')[0][-70:]] += c
    cat[label] += c
print('total Ir %d' % total)
for k, v in cat.most_common(): print('%6.2f%%  %s' % (100.0 * v / total, k))
print('-- top "other" functions')
for k, v in fns.most_common(6): print('%6.2f%%  %s' % (100.0 * v / total, k))
