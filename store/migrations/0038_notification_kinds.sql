-- A notification's words are no longer stored: a new row keeps its notice
-- kind (market.NoticeKind) and the values that fill it in (JSON of
-- market.NoticeParams), and the words are written where they are shown —
-- the notifications page and the e-mail sent with it. A row written before
-- is of kind 'text': its words stay in message and read as before. The
-- outbox keeps the same pair for the notification mail it holds (its body
-- stays for the security mail, which is composed as text).
ALTER TABLE notifications ADD COLUMN notice TEXT NOT NULL DEFAULT 'text';
ALTER TABLE notifications ADD COLUMN params TEXT NOT NULL DEFAULT '{}';
ALTER TABLE mail_outbox ADD COLUMN notice TEXT NOT NULL DEFAULT 'text';
ALTER TABLE mail_outbox ADD COLUMN params TEXT NOT NULL DEFAULT '{}';
