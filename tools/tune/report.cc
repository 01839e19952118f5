#include "tools/tune/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace attn_tune {
namespace {

using attn::internal::TuningEntry;
using attn::internal::TuningTable;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// One colour per kernel, by its place in the kernel table (a palette of
// distinct hues; grey for a name the table does not have).
std::string Color(const std::string& kernel) {
  static const char* const kPalette[] = {"#d62728", "#2ca02c", "#1f77b4", "#7f7f7f",
                                         "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};
  const std::vector<attn::KernelInfo>& kernels = attn::Kernels();
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernel == kernels[i].name) return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];
  }
  return "#bcbd22";
}

std::string LengthText(int64_t t) {
  return t >= 1024 && t % 1024 == 0 ? std::to_string(t / 1024) + "k" : std::to_string(t);
}

// Which chart row a shape belongs to: its x axis is T_k for decode and for
// T_q != T_k, T for square prefill.
std::string Kind(const TuningEntry& e) {
  if (e.shape.q_len == 1) return "decode (T_q = 1), x: T_k";
  if (e.shape.q_len == e.shape.kv_len) {
    return e.shape.causal ? "prefill, causal, x: T = T_q = T_k" : "prefill, x: T = T_q = T_k";
  }
  return e.shape.causal ? "other shapes, causal, x: T_k" : "other shapes, x: T_k";
}

double NiceStep(double range) {
  const double raw = range / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10.0 * p;
}

// One chart: lines per kernel over the entries (all of one d, kind, threads).
std::string Chart(const std::vector<const TuningEntry*>& entries, double peak,
                  const std::string& title) {
  constexpr double W = 380, H = 250, L = 52, R = 12, T = 26, B = 36;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> lines;
  std::set<int64_t> xs;
  double y_max = peak;
  for (const TuningEntry* e : entries) {
    for (const auto& [kernel, gflops] : e->kernel_gflops) {
      lines[kernel].push_back({e->shape.kv_len, gflops});
      y_max = std::max(y_max, gflops);
    }
    xs.insert(e->shape.kv_len);
  }
  if (y_max <= 0) y_max = 1;
  const double step = NiceStep(y_max * 1.05);
  y_max = std::ceil(y_max * 1.05 / step) * step;
  const double lx0 = std::log2(double(*xs.begin())), lx1 = std::log2(double(*xs.rbegin()));
  auto px = [&](int64_t x) {
    if (lx1 <= lx0) return L + (W - L - R) / 2;
    return L + (std::log2(double(x)) - lx0) / (lx1 - lx0) * (W - L - R);
  };
  auto py = [&](double y) { return T + (1.0 - y / y_max) * (H - T - B); };

  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0}' height='{1}' viewBox='0 0 {0} {1}'>"
      "<text x='{2}' y='16' class='title'>{3}</text>",
      W, H, L, Escape(title));
  for (double y = 0; y <= y_max + 1e-9; y += step) {
    s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' class='grid'/>"
                     "<text x='{}' y='{:.1f}' class='ytick'>{:g}</text>",
                     L, W - R, py(y), py(y), L - 4, py(y) + 4, y);
  }
  for (int64_t x : xs) {
    s += fmt::format("<text x='{:.1f}' y='{}' class='xtick'>{}</text>", px(x), H - B + 15,
                     LengthText(x));
  }
  s += fmt::format("<text x='{}' y='{}' class='axis'>GFLOP/s</text>", 4, T - 6);
  if (peak > 0) {
    s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' class='peak'/>"
                     "<text x='{}' y='{:.1f}' class='peaklabel'>FMA peak {:.0f}</text>",
                     L, W - R, py(peak), py(peak), W - R - 4, py(peak) - 4, peak);
  }
  for (auto& [kernel, points] : lines) {
    std::sort(points.begin(), points.end());
    std::string path;
    for (const auto& [x, y] : points) {
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", px(x), py(y));
    }
    s += fmt::format("<path d='{}' stroke='{}' class='line'/>", path, Color(kernel));
    for (const auto& [x, y] : points) {
      s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='2.5' fill='{}'><title>{} T={}: {:.1f} "
                       "GFLOP/s</title></circle>",
                       px(x), py(y), Color(kernel), kernel, x, y);
    }
  }
  s += "</svg>";
  return s;
}

}  // namespace

std::string RenderReport(const TuningTable& table) {
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>attn-tune report</title>"
      "<style>body{font-family:sans-serif;margin:20px;color:#222}"
      "svg{margin:4px;border:1px solid #ddd;background:#fff}"
      ".title{font-size:13px;font-weight:bold}.ytick{font-size:10px;text-anchor:end}"
      ".xtick{font-size:10px;text-anchor:middle}.axis{font-size:10px}"
      ".grid{stroke:#eee}.peak{stroke:#000;stroke-dasharray:6 4}"
      ".peaklabel{font-size:10px;text-anchor:end}.line{fill:none;stroke-width:2}"
      "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
      "text-align:right}.key span{display:inline-block;width:14px;height:4px;margin:0 4px 3px 12px}"
      "</style></head><body>\n";
  html += "<h1>attn-tune report</h1>\n";
  html += fmt::format(
      "<p>CPU {} &middot; SIMD target {} &middot; attn {} &middot; {} head(s) per problem "
      "&middot; made {}</p>\n",
      Escape(table.cpu_model), Escape(table.target), Escape(table.library_version), table.heads,
      Escape(table.created));
  html += "<p class='key'>Best configuration of each kernel:";
  for (const attn::KernelInfo& k : attn::Kernels()) {
    html += fmt::format("<span style='background:{}'></span>{}", Color(k.name), k.name);
  }
  html += "<span style='background:#000'></span>measured FP32 FMA peak (dashed)</p>\n";

  // Rows: (threads, kind); charts within a row: one per d.
  std::map<std::tuple<int, std::string>, std::map<int64_t, std::vector<const TuningEntry*>>> rows;
  for (const TuningEntry& e : table.entries) {
    rows[{e.shape.threads, Kind(e)}][e.shape.head_dim].push_back(&e);
  }
  for (const auto& [row, by_d] : rows) {
    const int threads = std::get<0>(row);
    const auto peak = table.peak_gflops.find(threads);
    html += fmt::format("<h2>{} thread{}, {}</h2>\n<div>", threads, threads == 1 ? "" : "s",
                        Escape(std::get<1>(row)));
    for (const auto& [d, entries] : by_d) {
      html += Chart(entries, peak == table.peak_gflops.end() ? 0.0 : peak->second,
                    fmt::format("d = {}", d));
    }
    html += "</div>\n";
  }

  html += "<h2>Winners</h2>\n<table><tr><th>T_q</th><th>T_k</th><th>d</th><th>causal</th>"
          "<th>threads</th><th>kernel</th><th>q_block</th><th>kv_block</th><th>kv_splits</th>"
          "<th>GFLOP/s</th><th>of peak</th><th>vs default</th><th>vs naive</th></tr>\n";
  for (const TuningEntry& e : table.entries) {
    const auto& f = e.figures;
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.0f}%</td><td>{:.2f}x</td><td>{}{:.0f}x</td>"
        "</tr>\n",
        e.shape.q_len, e.shape.kv_len, e.shape.head_dim, e.shape.causal ? "yes" : "no",
        e.shape.threads, attn::KernelName(e.kernel), e.tiles.q_block, e.tiles.kv_block,
        e.tiles.kv_splits, f.gflops, 100 * f.peak_fraction, f.speedup_vs_default,
        f.naive_extrapolated ? "~" : "", f.speedup_vs_naive);
  }
  html += "</table>\n<p>~: naive timed on sampled rows and scaled by FLOPs.</p>\n</body></html>\n";
  return html;
}

}  // namespace attn_tune
