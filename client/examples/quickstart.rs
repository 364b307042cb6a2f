use delayq_client::{Client, Consumer, MessageView, NewMessage, Outcome};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), delayq_client::Error> {
    let client = Client::new("http://127.0.0.1:7070")?;
    let sms = NewMessage::new("sms", r#"{"order":42}"#).delay(Duration::from_secs(2));
    println!("pushed {}", client.push(&sms).await?.id);
    let handler = |msg: MessageView| async move {
        println!("{}: {}", msg.id, msg.body);
        Outcome::Ack
    };
    let consumer = Consumer::new(client, "sms").concurrency(4);
    let stop = async { tokio::signal::ctrl_c().await.unwrap() };
    consumer.run(handler, stop).await?;
    Ok(())
}
