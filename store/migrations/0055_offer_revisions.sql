-- An edit of a listed offer that changes a claim (hardware, figures, terms
-- against the buyer: market.EditNeedsReview) waits here for review while
-- the listed version stays on the market (issue 31, docs/offers.md). One
-- per offer: a second edit replaces the first. body is the submitted
-- offer as JSON; approving it writes it over the offer, rejecting drops it.
CREATE TABLE offer_revisions (
    offer_id     INTEGER PRIMARY KEY REFERENCES offers (id),
    body         TEXT    NOT NULL,
    submitted_at INTEGER NOT NULL
);
