/* book/_ext/search_scorer.js: the book's search order (Sphinx's html_search_scorer; see course_html.py).
 *
 * Sphinx 7.4 gives every page that holds the query's words one of a few equal scores and orders equal
 * scores by title as text, so "10. ..." to "16. ..." came before "4. Masking" for "attention mask".
 * Here a page gains, on top of Sphinx's score:
 *   100 x the share of the query's words found in the page's title,
 *   10 x the share of the query's words found in the titles of its sections,
 *   at most 1 for a title that is little more than the query: (the query's words in the title) /
 *   (the words of the query and of the title together),
 *   and at most 2 for its place in the book (the chapters in order, then the other pages),
 * so a chapter whose title holds the query comes first, the shortest such title or, as often, the
 * chapter that teaches it (the earliest) before the later ones that build on it ("KV cache": 12, not
 * 16's "the KV cache compressed"). Words are cut and stemmed as Sphinx cuts and stems the query.
 */
var Scorer = {
  // Sphinx's defaults (searchtools.js defines none when a Scorer exists)
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,

  _cache: null,

  _words: (text) => {
    const stemmer = new Stemmer();
    const words = new Set();
    // a title may hold markup: <span class="section-number">4. </span>Masking
    splitQuery(String(text).replace(/<[^>]*>/g, " ").trim()).forEach((word) => {
      const lower = word.toLowerCase();
      if (!lower || stopwords.indexOf(lower) !== -1 || lower.match(/^\d+$/) || lower[0] === "-") return;
      words.add(stemmer.stemWord(lower));
    });
    return words;
  },

  _prepare: () => {
    const query = new URLSearchParams(window.location.search).get("q") || "";
    if (Scorer._cache && Scorer._cache.query === query) return Scorer._cache;
    const index = Search._index;
    const pages = index.titles.map((title) => Scorer._words(title));
    const sections = index.titles.map(() => new Set());
    for (const [title, found] of Object.entries(index.alltitles || {})) {
      const words = Scorer._words(title);
      for (const [file] of found) words.forEach((w) => sections[file].add(w));
    }
    // the book's order: chapters (notebooks/NN_...) first, by name, then the other pages
    const order = index.docnames
      .map((name, file) => [name.startsWith("notebooks/") ? 0 : 1, name, file])
      .sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
      .map((entry) => entry[2]);
    const place = new Map(order.map((file, i) => [index.docnames[file], i]));
    Scorer._cache = { query, words: Scorer._words(query), pages, sections, place, n: order.length };
    return Scorer._cache;
  },

  score: (result) => {
    const [docname, _title, _anchor, _descr, score, _filename] = result;
    const c = Scorer._prepare();
    const file = Search._index.docnames.indexOf(docname);
    if (file < 0 || c.words.size === 0) return score;
    const page = c.pages[file];
    let inTitle = 0, inSections = 0;
    c.words.forEach((w) => {
      if (page.has(w)) inTitle += 1;
      if (c.sections[file].has(w)) inSections += 1;
    });
    const union = c.words.size + page.size - inTitle;
    const place = c.place.has(docname) ? c.place.get(docname) : c.n;
    const title = (100 * inTitle) / c.words.size + inTitle / union;
    return score + title + (10 * inSections) / c.words.size + (2 * (c.n - place)) / (c.n + 1);
  },
};
