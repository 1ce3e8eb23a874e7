"""The course's tools for instructors and authors, beside the learner's library ``attnlib``.

==========================  ==================================================================
``coursetools.homework``    ``python -m coursetools.homework release|grade``: student versions of the
                            chapters (solutions removed) and honest grading of submissions
``coursetools.translate``   the Chinese edition's notebooks: markdown from the book's catalogs in
                            ``locales/`` (``python -m coursetools.translate SRC DEST``)
==========================  ==================================================================

``attnlib`` holds what the chapters build and never imports this package. The tools need
nbformat, nbclient, ipykernel and polib (``requirements.txt``, or ``pip install
"attnlib[tools]"``); the grader's report is in the language of ``ATTNLIB_LANG``, from
attnlib's catalog (``attnlib.i18n``).
"""
