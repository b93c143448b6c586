//===- Plot.cpp - log-log line plots as SVG and PNG -----------------------===//
//
// One drawing routine over a small canvas interface; the SVG canvas writes
// elements, the PNG canvas rasterises into RGB pixels that zlib compresses.
//
//===----------------------------------------------------------------------===//
#include "Plot.h"

#include "kiln/runtime/Error.h"

#include <fmt/core.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>

namespace kiln::cli {

namespace {
constexpr int W = 1000, H = 560, L = 100, R = 290, T = 50, B = 70;

class Canvas {
public:
  virtual ~Canvas() = default;
  virtual void line(double x0, double y0, double x1, double y1, uint32_t rgb,
                    double width, bool dashed) = 0;
  virtual void dot(double x, double y, double r, uint32_t rgb) = 0;
  /// anchor: 0 left, 1 middle, 2 right; vertical text when `up`.
  virtual void text(double x, double y, const std::string &s, int anchor,
                    bool up = false) = 0;
};

std::string tickLabel(double v, bool binary) {
  if (binary && v >= 1024) {
    const char *unit[] = {"k", "M", "G"};
    int i = 0;
    for (v /= 1024; v >= 1024 && i < 2; ++i)
      v /= 1024;
    return fmt::format("{:g}{}", v, unit[i]);
  }
  return fmt::format("{:g}", v);
}

void draw(const Plot &p, Canvas &c) {
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  for (const Series &s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  if (x1 <= 0 || y1 <= 0)
    throw Error("plot '" + p.title + "' has no positive data");
  // x: powers of two spanning the data; y: whole decades.
  double lx0 = std::floor(std::log2(x0)), lx1 = std::ceil(std::log2(x1));
  double ly0 = std::floor(std::log10(y0)), ly1 = std::ceil(std::log10(y1));
  if (lx1 == lx0)
    lx1 += 1;
  if (ly1 == ly0)
    ly1 += 1;
  auto px = [&](double x) {
    return L + (std::log2(x) - lx0) / (lx1 - lx0) * (W - L - R);
  };
  auto py = [&](double y) {
    return H - B - (std::log10(y) - ly0) / (ly1 - ly0) * (H - T - B);
  };
  c.text(W / 2.0, 28, p.title, 1); // centred on the image: titles are long
  for (double e = lx0; e <= lx1; e += 1) {
    double x = px(std::exp2(e));
    c.line(x, T, x, H - B, 0xdddddd, 1, false);
    c.text(x, H - B + 20, tickLabel(std::exp2(e), true), 1);
  }
  for (double e = ly0; e <= ly1; e += 1) {
    double y = py(std::pow(10, e));
    c.line(L, y, W - R, y, 0xdddddd, 1, false);
    c.text(L - 8, y + 4, tickLabel(std::pow(10, e), false), 2);
  }
  c.line(L, H - B, W - R, H - B, 0x000000, 1.5, false);
  c.line(L, T, L, H - B, 0x000000, 1.5, false);
  c.text((L + W - R) / 2.0, H - 22, p.xLabel, 1);
  c.text(24, (T + H - B) / 2.0, p.yLabel, 1, true);
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series &s = p.series[k];
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (i)
        c.line(px(s.x[i - 1]), py(s.y[i - 1]), px(s.x[i]), py(s.y[i]), s.rgb,
               2.5, s.dashed);
      c.dot(px(s.x[i]), py(s.y[i]), 3.5, s.rgb);
    }
    double ly = T + 10 + 22.0 * double(k);
    c.line(W - R + 20, ly, W - R + 50, ly, s.rgb, 2.5, s.dashed);
    c.text(W - R + 58, ly + 4, s.label, 0);
  }
}

std::string hex(uint32_t rgb) { return fmt::format("#{:06x}", rgb); }

class SvgCanvas : public Canvas {
public:
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" "
      "height=\"100%\" fill=\"white\"/>\n",
      W, H);
  void line(double x0, double y0, double x1, double y1, uint32_t rgb,
            double width, bool dashed) override {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" "
                       "y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
                       x0, y0, x1, y1, hex(rgb), width,
                       dashed ? " stroke-dasharray=\"7,5\"" : "");
  }
  void dot(double x, double y, double r, uint32_t rgb) override {
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" "
                       "fill=\"{}\"/>\n",
                       x, y, r, hex(rgb));
  }
  void text(double x, double y, const std::string &s, int anchor,
            bool up) override {
    const char *a[] = {"start", "middle", "end"};
    std::string esc;
    for (char ch : s)
      esc += ch == '<' ? "&lt;" : ch == '&' ? "&amp;" : std::string(1, ch);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\"{}>"
                       "{}</text>\n",
                       x, y, a[anchor],
                       up ? fmt::format(" transform=\"rotate(-90 {:.1f} "
                                        "{:.1f})\"",
                                        x, y)
                          : "",
                       esc);
  }
};

// 5x7 glyphs, rows top to bottom.
const std::map<char, const char *> &font() {
  static const std::map<char, const char *> f = {
      {'0', "01110100011001110101110011000101110"},
      {'1', "00100011000010000100001000010001110"},
      {'2', "01110100010000100010001000100011111"},
      {'3', "11111000100010000010000011000101110"},
      {'4', "00010001100101010010111110001000010"},
      {'5', "11111100001111000001000011000101110"},
      {'6', "00110010001000011110100011000101110"},
      {'7', "11111000010001000100010000100001000"},
      {'8', "01110100011000101110100011000101110"},
      {'9', "01110100011000101111000010001001100"},
      {'A', "01110100011000111111100011000110001"},
      {'B', "11110100011000111110100011000111110"},
      {'C', "01110100011000010000100001000101110"},
      {'D', "11100100101000110001100011001011100"},
      {'E', "11111100001000011110100001000011111"},
      {'F', "11111100001000011110100001000010000"},
      {'G', "01110100011000010111100011000101111"},
      {'H', "10001100011000111111100011000110001"},
      {'I', "01110001000010000100001000010001110"},
      {'J', "00111000100001000010000101001001100"},
      {'K', "10001100101010011000101001001010001"},
      {'L', "10000100001000010000100001000011111"},
      {'M', "10001110111010110101100011000110001"},
      {'N', "10001100011100110101100111000110001"},
      {'O', "01110100011000110001100011000101110"},
      {'P', "11110100011000111110100001000010000"},
      {'Q', "01110100011000110001101011001001101"},
      {'R', "11110100011000111110101001001010001"},
      {'S', "01111100001000001110000010000111110"},
      {'T', "11111001000010000100001000010000100"},
      {'U', "10001100011000110001100011000101110"},
      {'V', "10001100011000110001100010101000100"},
      {'W', "10001100011000110101101011010101010"},
      {'X', "10001100010101000100010101000110001"},
      {'Y', "10001100011000101010001000010000100"},
      {'Z', "11111000010001000100010001000011111"},
      {'.', "00000000000000000000000000110001100"},
      {',', "00000000000000000000011000010001000"},
      {'-', "00000000000000011111000000000000000"},
      {'(', "00010001000100001000010000010000010"},
      {')', "01000001000001000010000100010001000"},
      {'/', "00000000010001000100010001000000000"},
      {'=', "00000000001111100000111110000000000"},
      {':', "00000011000110000000011000110000000"},
      {'%', "11000110010001000100010001001100011"},
      {'+', "00000001000010011111001000010000000"},
      {'x', "00000000001000101010001000101010001"}};
  return f;
}

class PngCanvas : public Canvas {
public:
  std::vector<uint8_t> px = std::vector<uint8_t>(size_t(W) * H * 3, 255);
  void set(int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= W || y >= H)
      return;
    uint8_t *p = &px[(size_t(y) * W + size_t(x)) * 3];
    p[0] = uint8_t(rgb >> 16), p[1] = uint8_t(rgb >> 8), p[2] = uint8_t(rgb);
  }
  void dot(double x, double y, double r, uint32_t rgb) override {
    for (int dy = int(-r); dy <= int(r); ++dy)
      for (int dx = int(-r); dx <= int(r); ++dx)
        if (dx * dx + dy * dy <= r * r)
          set(int(std::lround(x)) + dx, int(std::lround(y)) + dy, rgb);
  }
  void line(double x0, double y0, double x1, double y1, uint32_t rgb,
            double width, bool dashed) override {
    double len = std::hypot(x1 - x0, y1 - y0);
    int steps = std::max(1, int(len * 2));
    for (int i = 0; i <= steps; ++i) {
      double t = double(i) / steps;
      if (dashed && std::fmod(t * len, 12.0) > 7.0)
        continue;
      double x = x0 + t * (x1 - x0), y = y0 + t * (y1 - y0);
      if (width <= 1.5)
        set(int(std::lround(x)), int(std::lround(y)), rgb);
      else
        dot(x, y, width / 2, rgb);
    }
  }
  void text(double x, double y, const std::string &s, int anchor,
            bool up) override {
    const int scale = 2, adv = 6 * scale;
    double len = double(s.size()) * adv;
    double start = anchor == 0 ? 0 : anchor == 1 ? -len / 2 : -len;
    for (size_t i = 0; i < s.size(); ++i) {
      char ch = char(std::toupper(static_cast<unsigned char>(s[i])));
      auto it = font().find(s[i] == 'x' ? 'x' : ch);
      if (it == font().end())
        continue;
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (it->second[r * 5 + col] == '1')
            for (int a = 0; a < scale; ++a)
              for (int b = 0; b < scale; ++b) {
                double u = start + double(i) * adv + col * scale + a;
                double v = (r - 7) * scale + b;
                if (up)
                  set(int(x + v), int(y - u), 0x222222);
                else
                  set(int(x + u), int(y + v), 0x222222);
              }
    }
  }
};

void chunk(std::string &out, const char *type, const std::string &data) {
  uint32_t n = uint32_t(data.size());
  for (int s = 24; s >= 0; s -= 8)
    out += char(n >> s);
  std::string body = std::string(type, 4) + data;
  out += body;
  uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef *>(body.data()),
                                uInt(body.size())));
  for (int s = 24; s >= 0; s -= 8)
    out += char(crc >> s);
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f)
      throw Error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()))
    throw Error("cannot rename " + tmp + " to " + path);
}
} // namespace

void writeSvg(const Plot &plot, const std::string &path) {
  SvgCanvas c;
  draw(plot, c);
  writeFile(path, c.out + "</svg>\n");
}

void writePng(const Plot &plot, const std::string &path) {
  PngCanvas c;
  draw(plot, c);
  std::string raw;
  raw.reserve(size_t(H) * (W * 3 + 1));
  for (int y = 0; y < H; ++y) {
    raw += '\0'; // filter: none
    raw.append(reinterpret_cast<const char *>(&c.px[size_t(y) * W * 3]),
               size_t(W) * 3);
  }
  uLongf size = compressBound(uLong(raw.size()));
  std::string z(size, '\0');
  if (compress2(reinterpret_cast<Bytef *>(z.data()), &size,
                reinterpret_cast<const Bytef *>(raw.data()), uLong(raw.size()),
                9) != Z_OK)
    throw Error("zlib could not compress " + path);
  z.resize(size);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  for (uint32_t v : {uint32_t(W), uint32_t(H)})
    for (int s = 24; s >= 0; s -= 8)
      ihdr += char(v >> s);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5); // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  writeFile(path, png);
}

} // namespace kiln::cli
