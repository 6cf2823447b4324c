//! A shard's side of the deliveries: the shard loop sends each `Effect::Deliver` to the
//! delivery thread (`WebhookOut`), and a task on the shard's executor takes the answers
//! into the shard's inbox as `Input::WebhookAnswered` (`serve_answers`), counting them in
//! the shard's metrics.

use super::thread::{Answer, Job, STOPPING};
use crate::inbox::Inbox;
use crate::metrics::ShardMetrics;
use flo_engine::WebhookCall;
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures_lite::StreamExt;
use std::rc::Rc;
use std::sync::Arc;

/// Where a shard sends its calls: the delivery thread, tagged with the shard.
pub(crate) struct WebhookOut {
    shard: u32,
    calls: UnboundedSender<Job>,
}

impl WebhookOut {
    pub(super) fn new(shard: u32, calls: UnboundedSender<Job>) -> WebhookOut {
        WebhookOut { shard, calls }
    }

    /// Sends `call` to the delivery thread; when the thread is gone, answers it at once
    /// (`the server is stopping`): every call gets its answer.
    pub fn send(&self, call: Box<WebhookCall>, inbox: &Inbox, metrics: &ShardMetrics) {
        let job = Job {
            shard: self.shard,
            call,
        };
        if let Err(refused) = self.calls.unbounded_send(job) {
            let call = refused.into_inner().call;
            answered(Answer::to(&call, Err(STOPPING.to_string())), inbox, metrics);
        }
    }
}

/// A shard's task: takes the answers of its calls into its inbox until the thread is gone.
pub(crate) async fn serve_answers(
    mut answers: UnboundedReceiver<Answer>,
    inbox: Rc<Inbox>,
    metrics: Arc<ShardMetrics>,
) {
    while let Some(answer) = answers.next().await {
        answered(answer, &inbox, &metrics);
    }
}

fn answered(answer: Answer, inbox: &Inbox, metrics: &ShardMetrics) {
    metrics.webhook_attempt(&answer.result);
    inbox.push(answer.into_input());
}
