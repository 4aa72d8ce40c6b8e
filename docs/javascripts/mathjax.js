// MathJax for the formulas of the docs pages (pymdownx.arithmatex, generic mode). MathJax itself is
// served by the site (javascripts/mathjax/, added by docs/_ext/mathjax_offline.py): no CDN.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  svg: { fontCache: "global" },
  // every page, the first included, is typeset by typesetPage below
  startup: { typeset: false },
};

// Material's instant navigation swaps page content without reloading: typeset each new page.
// MathJax loads after this file, so wait for it (startup.promise) instead of calling it too early.
function typesetPage() {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) {
    window.setTimeout(typesetPage, 50);
    return;
  }
  mj.startup.promise
    .then(() => {
      mj.typesetClear();
      return mj.typesetPromise();
    })
    .catch((err) => console.error("MathJax typesetting failed:", err));
}

if (typeof document$ !== "undefined") {
  document$.subscribe(typesetPage);
} else {
  document.addEventListener("DOMContentLoaded", typesetPage);
}
